package starter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

// What errors.Is finds in the error of a read (GetProxy, ListProxies, CheckHealth), or of
// CollectGarbage, whose workflow failed, by the workflow's failure type.
var (
	// ErrNotFound: GetProxy found no VM of the proxy.
	ErrNotFound = errors.New("proxy not found")
	// ErrTransient: Proxmox had trouble, or the VM is locked, being cloned, or of unknown
	// status; asking again later may answer.
	ErrTransient = errors.New("transient failure")
	// ErrPermanent: bad input, or a state a person must resolve; asking again fails again.
	ErrPermanent = errors.New("permanent failure")
)

// ErrInvalidProviderID is what errors.Is finds in the error of GetProxy given a key that starts
// like a provider ID ("vms/") but is not one. The call never reached Temporal.
var ErrInvalidProviderID = errors.New("invalid provider ID")

var readSentinels = map[string]error{
	core.FailNotFound:  ErrNotFound,
	core.FailTransient: ErrTransient,
	core.FailPermanent: ErrPermanent,
}

// readError is a read workflow's failure: its message is the workflow's own, prefixed with what
// was read unless it says so itself, and errors.Is finds the sentinel of its failure type.
type readError struct {
	what     string
	sentinel error
	err      error
}

func (e readError) Error() string {
	var appErr *temporal.ApplicationError
	if errors.As(e.err, &appErr) {
		if strings.HasPrefix(appErr.Message(), e.what+":") {
			return appErr.Message()
		}
		return fmt.Sprintf("%s: %s", e.what, appErr.Message())
	}
	return fmt.Sprintf("%s: %v", e.what, e.err)
}
func (e readError) Unwrap() error        { return e.err }
func (e readError) Is(target error) bool { return e.sentinel != nil && target == e.sentinel }

// startedKey is the context key of WithStarted's function.
type startedKey struct{}

// WithStarted returns a copy of ctx under which a read (GetProxy, ListProxies, CheckHealth) or
// CollectGarbage calls started with the ID of the workflow it has started, before it waits for
// it: for the caller to follow it meanwhile with WorkflowWorkers.
func WithStarted(ctx context.Context, started func(workflowID string)) context.Context {
	return context.WithValue(ctx, startedKey{}, started)
}

// read runs a read workflow with ID id and waits for its result.
func (c *Client) read(ctx context.Context, what, id, workflowType string, res any, args ...any) error {
	return c.execute(ctx, what, core.ReadOptions(id, c.taskQueue), workflowType, res, args...)
}

// execute runs a workflow that the caller waits for, a read or a garbage collection, and waits
// for its result. A failure is a readError.
func (c *Client) execute(ctx context.Context, what string, opts client.StartWorkflowOptions, workflowType string, res any, args ...any) error {
	run, err := c.temporal.ExecuteWorkflow(ctx, opts, workflowType, args...)
	if err != nil {
		return fmt.Errorf("start %s: %w", what, err)
	}
	if started, ok := ctx.Value(startedKey{}).(func(string)); ok {
		started(run.GetID())
	}
	if err := run.Get(ctx, res); err != nil {
		return readError{what: what, sentinel: readSentinels[FailureType(err)], err: err}
	}
	return nil
}

// requestID is a new random ID for one read, so that reads never share a workflow ID.
func requestID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Workers describes who polls the Client's task queue, where a read or a garbage collection
// waits for a worker. Without a workflow to ask about, it cannot tell a worker that was killed
// a moment ago from a live one: WorkflowWorkers can.
func (c *Client) Workers(ctx context.Context) (Workers, error) {
	return c.workers(ctx, c.taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
}

// WorkflowWorkers describes who polls the task queue of the latest run of workflowID, and names
// its task that waits unserved, if one does: a read's, whose ID WithStarted tells.
func (c *Client) WorkflowWorkers(ctx context.Context, workflowID string) (Workers, error) {
	desc, err := c.temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return Workers{}, fmt.Errorf("describe workflow %s: %w", workflowID, err)
	}
	return c.workersOf(ctx, desc)
}

// GetProxy finds the VM of a proxy, by its UID or its provider ID ("vms/<vmid>/<name>"), and
// says what it is doing: Running with its addresses, Provisioning, or Stopped. It runs the GetProxy
// workflow under an ID of its own (core.GetProxyWorkflowID with a random request ID), so
// it runs beside a create or delete of the same proxy and never joins one.
//
// A failure is ErrNotFound (no such VM: the workflow completes with the answer, which the
// returned error carries), ErrTransient (locked, being cloned, status unknown,
// Proxmox trouble) or ErrPermanent to errors.Is. A key that is neither a UID nor a provider ID
// fails with ErrInvalidUID or ErrInvalidProviderID before Temporal is called.
func (c *Client) GetProxy(ctx context.Context, uidOrProviderID string) (proxyvm.GetProxyResult, error) {
	var in proxyvm.GetProxyInput
	if strings.HasPrefix(uidOrProviderID, "vms/") {
		if _, _, err := proxy.ParseProviderID(uidOrProviderID); err != nil {
			return proxyvm.GetProxyResult{}, fmt.Errorf("%w: %v", ErrInvalidProviderID, err)
		}
		in.ProviderID = uidOrProviderID
	} else {
		if err := checkUID(uidOrProviderID); err != nil {
			return proxyvm.GetProxyResult{}, err
		}
		in.UID = uidOrProviderID
	}
	var res proxyvm.GetProxyResult
	what := "get proxy " + uidOrProviderID
	if err := c.read(ctx, what, core.GetProxyWorkflowID(uidOrProviderID, requestID()), core.GetProxyName, &res, in); err != nil {
		return proxyvm.GetProxyResult{}, err
	}
	if res.NotFound != "" {
		// The workflow completes with the answer; to the caller it is ErrNotFound as before.
		return proxyvm.GetProxyResult{}, readError{what: what, sentinel: ErrNotFound,
			err: temporal.NewNonRetryableApplicationError(res.NotFound, core.FailNotFound, nil)}
	}
	return res, nil
}

// ListProxies lists the VMs on the cluster that carry pveflow's mark, by running the
// ListProxies workflow. Unlike List, which lists workflows, it asks Proxmox.
func (c *Client) ListProxies(ctx context.Context) (reads.ListProxiesResult, error) {
	var res reads.ListProxiesResult
	return res, c.read(ctx, "list proxies", core.ListProxiesWorkflowID(requestID()), core.ListProxiesName, &res)
}

// CheckHealth checks every configured node now, by running the CheckHealth workflow. An
// unhealthy node is in the result, not an error.
func (c *Client) CheckHealth(ctx context.Context) (reads.CheckHealthResult, error) {
	var res reads.CheckHealthResult
	return res, c.read(ctx, "check health", core.CheckHealthWorkflowID(requestID()), core.CheckHealthName, &res)
}

// ErrNoHealthResult is what errors.Is finds in LastHealth's error while the health schedule has
// no completed run, or there is no health schedule yet.
var ErrNoHealthResult = errors.New("no scheduled health check has completed yet")

// LastHealth is the result of the latest completed run of the health schedule of the Client's
// task queue, newest of the schedule's recent actions first. It fails with ErrNoHealthResult
// while none has completed, saying how often the schedule runs, or that no worker made it.
func (c *Client) LastHealth(ctx context.Context) (reads.CheckHealthResult, error) {
	id := core.HealthScheduleID(c.taskQueue)
	desc, err := c.temporal.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return reads.CheckHealthResult{}, fmt.Errorf("%w: no worker of task queue %s has made the health schedule (worker --health-every)",
			ErrNoHealthResult, c.taskQueue)
	}
	if err != nil {
		return reads.CheckHealthResult{}, fmt.Errorf("health schedule %s: %w", id, err)
	}
	actions := desc.Info.RecentActions
	for _, action := range slices.Backward(actions) {
		run := action.StartWorkflowResult
		if run == nil {
			continue
		}
		info, err := c.temporal.DescribeWorkflowExecution(ctx, run.WorkflowID, run.FirstExecutionRunID)
		if err != nil {
			return reads.CheckHealthResult{}, fmt.Errorf("health check %s: %w", run.WorkflowID, err)
		}
		if info.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			continue
		}
		var res reads.CheckHealthResult
		if err := c.temporal.GetWorkflow(ctx, run.WorkflowID, run.FirstExecutionRunID).Get(ctx, &res); err != nil {
			return reads.CheckHealthResult{}, fmt.Errorf("health check %s: %w", run.WorkflowID, err)
		}
		return res, nil
	}
	if spec := desc.Schedule.Spec; spec != nil && len(spec.Intervals) > 0 {
		return reads.CheckHealthResult{}, fmt.Errorf("%w: the worker runs one every %s (worker --health-every)",
			ErrNoHealthResult, spec.Intervals[0].Every)
	}
	return reads.CheckHealthResult{}, ErrNoHealthResult
}

// ApplyHealthSchedule makes the Temporal Schedule that runs CheckHealth on the Client's task
// queue every interval, or updates the one there is to it: the worker calls it as it starts,
// so every worker start makes it match that worker's setting, and calling it twice changes
// nothing. A run still going when the next is due makes the next one skip.
func (c *Client) ApplyHealthSchedule(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("health check interval %s: want a positive duration", every)
	}
	id := core.HealthScheduleID(c.taskQueue)
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}}
	action := &client.ScheduleWorkflowAction{
		ID:                       core.HealthScheduleWorkflowID(c.taskQueue),
		Workflow:                 core.CheckHealthName,
		TaskQueue:                c.taskQueue,
		WorkflowExecutionTimeout: core.ReadTimeout,
	}
	schedules := c.temporal.ScheduleClient()
	_, err := schedules.Create(ctx, client.ScheduleOptions{
		ID:      id,
		Spec:    spec,
		Action:  action,
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	})
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		if err != nil {
			return fmt.Errorf("create health schedule %s: %w", id, err)
		}
		return nil
	}
	err = schedules.GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := in.Description.Schedule
			s.Spec = &spec
			s.Action = action
			if s.Policy == nil {
				s.Policy = &client.SchedulePolicies{}
			}
			s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	if err != nil {
		return fmt.Errorf("update health schedule %s: %w", id, err)
	}
	return nil
}
