// Package activities is the only place where pveflow touches Proxmox. Each activity but
// DescribeRun, which asks Temporal about a workflow run, RequestChange and RequestDelete,
// which send requests to Proxy entities (proxies.go), and AllocateAddress, FreeAddress and
// ReconcileAddresses, which send them to address pools (addresspools.go), maps one to one to a method of the
// pve.API seam, so a workflow history and the Temporal UI read like the Proxmox calls they are;
// Permissions makes its one call per path, TaskStatus reads a task's log too when the task
// ended with warnings (preflight.go), CloudInitResult reads one file through AgentFileRead and
// returns what it says, never the file, and ObserveVMs compares the one list it reads with what
// the observer saw before (observe.go).
//
// The method names are recorded in workflow histories as activity types: renaming one breaks the
// replay of every history that used it. Activities is registered as a whole, so it has no other
// exported methods.
//
// The workflows make most calls as local activities, and as activities only when a first
// attempt meets something to wait out (docs/architecture.md, What a step costs): the same
// methods either way.
//
// Waiting is not a loop here. TaskStatus, VMStatus and AgentNetworkInterfaces return a
// retryable, benign error while the thing waited for has not happened, and the workflow's retry
// policy (its ScheduleToClose budget and poll intervals) turns that into polling.
package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/telemetry"
)

// Activities holds what the activities need: the seam, the provider config, where DescribeRun
// asks Temporal about a run, and where RequestChange and RequestDelete send their requests.
type Activities struct {
	API     pve.API
	Proxmox config.Proxmox
	// Runs describes and signals workflow runs; a worker's is a TemporalRuns.
	Runs Runs
	// Proxies sends requests to Proxy entities; a worker's is an adapter over starter.Client.
	Proxies Proxies
	// AddressPools sends requests to AddressPool workflows; a worker's is an adapter over
	// starter.Client.
	AddressPools AddressPools
	// Privileges keeps the privileges Permissions read for a while; nil reads them every time.
	Privileges *PrivilegeCache
	// Now is the clock used to say how long a task has been running; time.Now when nil.
	Now func() time.Time

	// LookAgainWithin is the longest a TaskStatus attempt waits in the worker for its next look
	// near the task's expected end, rather than failing for Temporal to retry it then; zero
	// makes every look an attempt of its own (DefaultLookAgainWithin, looksAgainHere).
	LookAgainWithin time.Duration

	// paces is how long this worker saw each kind of task take, which paces the looks of a
	// wait given no expectation.
	paces taskPaces
}

// VMRef names a VM on a node.
type VMRef struct {
	Node string `json:"node"`
	VMID int    `json:"vmid"`
}

func (r VMRef) String() string { return fmt.Sprintf("VM %d on node %s", r.VMID, r.Node) }

// annotate puts the VM on the activity's span.
func (r VMRef) annotate(ctx context.Context) {
	telemetry.PVETarget{Node: r.Node, VMID: r.VMID}.Annotate(ctx)
}

// StorageRef names a storage on a node.
type StorageRef struct {
	Node    string `json:"node"`
	Storage string `json:"storage"`
}

// annotate puts the storage on the activity's span.
func (r StorageRef) annotate(ctx context.Context) {
	telemetry.PVETarget{Node: r.Node, Storage: r.Storage}.Annotate(ctx)
}

// Version reads the cluster's PVE version.
func (a *Activities) Version(ctx context.Context) (pve.Version, error) {
	v, err := a.API.Version(ctx)
	if err != nil {
		return pve.Version{}, failure("read version", err)
	}
	return v, nil
}

// NodeStatus reads a node's status.
func (a *Activities) NodeStatus(ctx context.Context, node string) (pve.NodeStatus, error) {
	telemetry.PVETarget{Node: node}.Annotate(ctx)
	s, err := a.API.NodeStatus(ctx, node)
	if err != nil {
		return pve.NodeStatus{}, failure("read status of node "+node, err)
	}
	return s, nil
}

// StorageStatus reads a storage's status on a node.
func (a *Activities) StorageStatus(ctx context.Context, ref StorageRef) (pve.StorageStatus, error) {
	ref.annotate(ctx)
	s, err := a.API.StorageStatus(ctx, ref.Node, ref.Storage)
	if err != nil {
		return pve.StorageStatus{}, failure(fmt.Sprintf("read status of storage %s on node %s", ref.Storage, ref.Node), err)
	}
	return s, nil
}

// ResourcesFilter names the VMs of the cluster a caller wants: those with one of VMIDs or one
// of Names. The zero filter wants every VM.
type ResourcesFilter struct {
	VMIDs []int    `json:"vmids,omitempty"`
	Names []string `json:"names,omitempty"`
}

// ClusterResources lists the VMs of the cluster that filter wants. PVE lists them all; what a
// workflow keeps of the list, in its history and its state, is what it asked for, so that a
// create's cost does not grow with the cluster.
func (a *Activities) ClusterResources(ctx context.Context, filter ResourcesFilter) ([]pve.VMResource, error) {
	rs, err := a.API.ClusterResources(ctx)
	if err != nil {
		return nil, failure("list cluster resources", err)
	}
	if len(filter.VMIDs) == 0 && len(filter.Names) == 0 {
		return rs, nil
	}
	return slices.DeleteFunc(rs, func(r pve.VMResource) bool {
		return !slices.Contains(filter.VMIDs, r.VMID) && !slices.Contains(filter.Names, r.Name)
	}), nil
}

// VMConfigRequest is the input of VMConfig. Its JSON is a VMRef's when WaitFor is empty, as
// histories recorded before it existed hold.
type VMConfigRequest struct {
	VMRef
	// WaitFor is WaitNone, WaitUnlocked or WaitOwnerKnown.
	WaitFor string `json:"waitFor,omitempty"`
}

// VMConfig reads a VM's configuration. With WaitFor set, it fails with a retryable NotReady
// error until the config is in that state, so the activity's retry policy polls.
func (a *Activities) VMConfig(ctx context.Context, req VMConfigRequest) (pve.VMConfig, error) {
	req.annotate(ctx)
	c, err := a.API.VMConfig(ctx, req.Node, req.VMID)
	if err != nil {
		return nil, failure("read config of "+req.VMRef.String(), err)
	}
	switch req.WaitFor {
	case WaitNone:
	case WaitUnlocked:
		if c["lock"] != "" {
			return c, notReady(ErrNotReady, 0, "%s is locked (%s), waiting for the lock to clear", req.VMRef, c["lock"])
		}
	case WaitOwnerKnown:
		if _, known := proxy.OwnerOf(c); !known {
			return c, notReady(ErrNotReady, 0, "%s is being cloned and shows no owner's mark yet, waiting for the clone to write it", req.VMRef)
		}
	default:
		return c, failure("read config of "+req.VMRef.String(), pve.Classified(pve.Permanent, fmt.Errorf("unknown wait %q", req.WaitFor)))
	}
	return c, nil
}

// SetVMConfigRequest is the input of SetVMConfig.
type SetVMConfigRequest struct {
	VMRef
	Params pve.VMConfig `json:"params"`
}

// SetVMConfig writes configuration keys of a VM.
func (a *Activities) SetVMConfig(ctx context.Context, req SetVMConfigRequest) error {
	req.annotate(ctx)
	if err := a.API.SetVMConfig(ctx, req.Node, req.VMID, req.Params); err != nil {
		return failure("set config of "+req.VMRef.String(), err)
	}
	return nil
}

// CloneRequest is the input of Clone: template TemplateVMID on Node is cloned with Params.
type CloneRequest struct {
	Node         string          `json:"node"`
	TemplateVMID int             `json:"templateVMID"`
	Params       pve.CloneParams `json:"params"`
}

// Clone starts a clone of a template and returns its task. Its call goes before the others that
// the call limits hold back (pve.PrioritySlot): the storage's clone slot it was granted stands free
// until it is made.
func (a *Activities) Clone(ctx context.Context, req CloneRequest) (pve.UPID, error) {
	telemetry.PVETarget{Node: req.Node, VMID: req.Params.NewID}.Annotate(ctx)
	ctx = pve.WithPriority(ctx, pve.PrioritySlot)
	return startTask(ctx, fmt.Sprintf("clone template %d on node %s to VM %d", req.TemplateVMID, req.Node, req.Params.NewID), func() (pve.UPID, error) { return a.API.Clone(ctx, req.Node, req.TemplateVMID, req.Params) })
}

// ResizeRequest is the input of Resize.
type ResizeRequest struct {
	VMRef
	Disk string `json:"disk"`
	// Size is PVE's size string, such as "20G".
	Size string `json:"size"`
}

// Resize starts growing a VM's disk and returns its task.
func (a *Activities) Resize(ctx context.Context, req ResizeRequest) (pve.UPID, error) {
	req.annotate(ctx)
	return startTask(ctx, fmt.Sprintf("resize disk %s of %s to %s", req.Disk, req.VMRef, req.Size), func() (pve.UPID, error) { return a.API.Resize(ctx, req.Node, req.VMID, req.Disk, req.Size) })
}

// Start starts a VM and returns the start task.
func (a *Activities) Start(ctx context.Context, ref VMRef) (pve.UPID, error) {
	ref.annotate(ctx)
	return startTask(ctx, "start "+ref.String(), func() (pve.UPID, error) { return a.API.Start(ctx, ref.Node, ref.VMID) })
}

// Stop stops a VM and returns the stop task.
func (a *Activities) Stop(ctx context.Context, ref VMRef) (pve.UPID, error) {
	ref.annotate(ctx)
	return startTask(ctx, "stop "+ref.String(), func() (pve.UPID, error) { return a.API.Stop(ctx, ref.Node, ref.VMID) })
}

// Reboot reboots a running VM and returns the reboot task: the guest shuts down and starts
// again, which applies the config's pending changes. A VM that is not running is a
// non-retryable NotRunning error.
func (a *Activities) Reboot(ctx context.Context, ref VMRef) (pve.UPID, error) {
	ref.annotate(ctx)
	return startTask(ctx, "reboot "+ref.String(), func() (pve.UPID, error) { return a.API.Reboot(ctx, ref.Node, ref.VMID) })
}

// Destroy destroys a stopped VM with its unreferenced disks and returns the destroy task.
func (a *Activities) Destroy(ctx context.Context, ref VMRef) (pve.UPID, error) {
	ref.annotate(ctx)
	return startTask(ctx, "destroy "+ref.String(), func() (pve.UPID, error) { return a.API.Destroy(ctx, ref.Node, ref.VMID) })
}

// What a VMStatus call can wait for.
const (
	// WaitNone reads the status once.
	WaitNone = ""
	// WaitRunning waits until the VM runs.
	WaitRunning = "running"
	// WaitStopped waits until the VM no longer runs.
	WaitStopped = "stopped"
	// WaitUnlocked waits until no lock (clone, backup, ...) is set on the VM.
	WaitUnlocked = "unlocked"
	// WaitOwnerKnown waits until a VM being cloned shows whose it is (proxy.OwnerOf): the
	// clone has written the config with its mark, or has ended. Only VMConfig can wait for it.
	WaitOwnerKnown = "owner-known"
)

// VMStatusRequest is the input of VMStatus.
type VMStatusRequest struct {
	VMRef
	// WaitFor is WaitNone, WaitRunning, WaitStopped or WaitUnlocked.
	WaitFor string `json:"waitFor,omitempty"`
	// Pace spaces the looks of a wait; without it, the retry policy does.
	Pace *Pace `json:"pace,omitempty"`
}

// VMStatus reads a VM's status. With WaitFor set, it fails with a retryable NotReady error until
// the VM is in that state, so the activity's retry policy polls.
func (a *Activities) VMStatus(ctx context.Context, req VMStatusRequest) (pve.VMStatus, error) {
	req.annotate(ctx)
	s, err := a.API.VMStatus(ctx, req.Node, req.VMID)
	if err != nil {
		return pve.VMStatus{}, failure("read status of "+req.VMRef.String(), err)
	}
	switch req.WaitFor {
	case WaitNone:
	case WaitRunning:
		if s.Status != "running" {
			return s, notReady(ErrNotReady, req.Pace.nextLook(a.now()), "%s is %s, waiting for it to run", req.VMRef, s.Status)
		}
	case WaitStopped:
		if s.Status == "running" {
			return s, notReady(ErrNotReady, req.Pace.nextLook(a.now()), "%s runs, waiting for it to stop", req.VMRef)
		}
	case WaitUnlocked:
		if s.Lock != "" {
			return s, notReady(ErrNotReady, req.Pace.nextLook(a.now()), "%s is locked (%s), waiting for the lock to clear", req.VMRef, s.Lock)
		}
	default:
		return s, failure("read status of "+req.VMRef.String(), pve.Classified(pve.Permanent, fmt.Errorf("unknown wait %q", req.WaitFor)))
	}
	return s, nil
}

// TaskStatusRequest is the input of TaskStatus.
type TaskStatusRequest struct {
	// Node runs the task; when empty it is taken from the UPID.
	Node string   `json:"node,omitempty"`
	UPID pve.UPID `json:"upid"`
	// Pace spaces the looks at the running task; without it, the retry policy does.
	Pace *Pace `json:"pace,omitempty"`
	// Then is a signal the look that finds the task ended well (OK, or with warnings) sends
	// before it returns, as SignalRun would: the clone's wait gives the create's clone lease back
	// by it, so that the lease comes back as soon as PVE's task has ended, from whichever worker
	// makes that look, not when the create's workflow task runs again (on a worker that may have
	// died meanwhile). Every look that finds the task ended sends it, so the workflow must take it
	// twice; one that fails is logged, and TaskResult.Signalled says whether it went. Paced, the
	// look adds to Arg, a JSON object, "waited": TaskResult.Waited, in nanoseconds.
	Then *SignalRunRequest `json:"then,omitempty"`
}

// Pace is how a wait spaces its looks: by Poll.NextLook of the time since Since, its first
// look. A look that finds the wait not over says when the next one comes (the ApplicationError's
// NextRetryDelay), as a retry policy, which spaces attempts by their number alone, cannot. The
// workflow gives the pace of its run's settings, so a worker's config read later does not change
// a wait under way.
type Pace struct {
	Since time.Time   `json:"since"`
	Poll  config.Poll `json:"poll"`
	// Expected is how long the wait is expected to last (a clone's, from the storage's last
	// clones): the looks gather around its end (config.Poll.NextLookExpecting).
	Expected time.Duration `json:"expected,omitempty"`
}

// nextLook is how long after now the wait paced by p looks again: 0, the retry policy's
// interval, without a pace.
func (p *Pace) nextLook(now time.Time) time.Duration {
	if p == nil {
		return 0
	}
	return p.Poll.NextLookExpecting(now.Sub(p.Since), p.Expected)
}

// TaskResult is a finished task's outcome.
type TaskResult struct {
	UPID       pve.UPID `json:"upid"`
	ExitStatus string   `json:"exitStatus"`
	Warnings   int      `json:"warnings,omitempty"`
	// WarningTexts are the warnings of a task that ended "WARNINGS: N", from its log, each
	// naming the task and its node.
	WarningTexts []string `json:"warningTexts,omitempty"`
	// Signalled reports that the request's Then signal was sent.
	Signalled bool `json:"signalled,omitempty"`
	// Waited is how long after its pace's Since the look that found the task ended was made:
	// what the task took, as its wait saw it. Zero without a pace.
	Waited time.Duration `json:"waited,omitempty"`
}

// TaskStatus waits for a Proxmox task: while it runs it fails with a retryable, benign
// TaskRunning error that says which task, on which node, for how long; a task that ended with an
// error is a non-retryable TaskFailed carrying the exit status; "WARNINGS: N" is success. A task
// that ended well is followed by req.Then's signal, if any. Scheduled with a heartbeat timeout,
// it heartbeats while it waits for PVE's and Temporal's answers, so that a look lost with its
// worker is made again at the heartbeat timeout.
func (a *Activities) TaskStatus(ctx context.Context, req TaskStatusRequest) (TaskResult, error) {
	if activity.GetInfo(ctx).HeartbeatTimeout > 0 {
		return beating(ctx, func(ctx context.Context) (TaskResult, error) { return a.taskStatus(ctx, req) })
	}
	return a.taskStatus(ctx, req)
}

func (a *Activities) taskStatus(ctx context.Context, req TaskStatusRequest) (TaskResult, error) {
	if req.Then != nil {
		ctx = pve.WithPriority(ctx, pve.PrioritySlot) // its end hands a clone slot on
	}
	info, err := pve.ParseUPID(req.UPID)
	if err != nil {
		return TaskResult{}, failure("read task status", pve.Classified(pve.Permanent, err))
	}
	node := req.Node
	if node == "" {
		node = info.Node
	}
	telemetry.PVETarget{Node: node, UPID: req.UPID}.Annotate(ctx)
	what := taskName(info.Type)
	kind := taskKind{typ: info.Type, node: node}
	pace := a.paces.paced(req.Pace, kind)
	s, err := a.API.TaskStatus(ctx, node, req.UPID)
	for looks := 1; err == nil && !s.Done(); looks++ {
		next := pace.nextLook(a.now())
		if !a.looksAgainHere(ctx, pace, next, looks) || sleep(ctx, next) != nil {
			running := a.now().Sub(time.Unix(info.StartTime, 0)).Truncate(time.Second)
			return TaskResult{}, notReady(ErrTaskRunning, next, "%s task %s still running on node %s (for %s)", what, req.UPID, node, running)
		}
		s, err = a.API.TaskStatus(ctx, node, req.UPID)
	}
	if err != nil {
		// Proxmox's trouble is looked at again at the wait's pace, which backs off as the wait
		// ages, so that the retry policy's own interval is left to looks lost with their worker.
		return TaskResult{}, failureLookingAgainIn(fmt.Sprintf("read status of %s task %s on node %s", what, req.UPID, node), err, pace.nextLook(a.now()))
	}
	a.recordTaskWait(ctx, info)
	warnings, err := s.Result()
	if err != nil {
		return TaskResult{}, failure(what+" task", err)
	}
	res := TaskResult{UPID: req.UPID, ExitStatus: s.ExitStatus, Warnings: warnings}
	if req.Pace != nil {
		res.Waited = a.now().Sub(req.Pace.Since)
		a.paces.saw(kind, res.Waited)
	}
	if warnings > 0 {
		if res.WarningTexts, err = a.taskWarnings(ctx, node, req.UPID, what, s.ExitStatus); err != nil {
			return TaskResult{}, err
		}
		activity.GetLogger(ctx).Warn("proxmox task ended with warnings", "task", what, "upid", string(req.UPID), "node", node, "exitStatus", s.ExitStatus, "warnings", res.WarningTexts)
	}
	if req.Then != nil {
		then := *req.Then
		if req.Pace != nil {
			if then.Arg, err = withWaited(then.Arg, res.Waited); err != nil {
				return TaskResult{}, failure(fmt.Sprintf("signal %s to workflow %s", then.Signal, then.WorkflowID), pve.Classified(pve.Permanent, err))
			}
		}
		if err := a.SignalRun(ctx, then); err != nil {
			activity.GetLogger(ctx).Warn("signal after the task's end not sent; the workflow sends its own", "upid", string(req.UPID), "error", err)
		} else {
			res.Signalled = true
		}
	}
	return res, nil
}

// withWaited is the JSON object arg with "waited" set to waited, in nanoseconds.
func withWaited(arg json.RawMessage, waited time.Duration) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(arg, &fields); err != nil {
		return nil, fmt.Errorf("the signal's argument is not a JSON object: %w", err)
	}
	if fields == nil {
		fields = map[string]json.RawMessage{}
	}
	fields["waited"] = json.RawMessage(strconv.FormatInt(int64(waited), 10))
	return json.Marshal(fields)
}

// Metrics of the task waits, as the SDK's metrics handler names them; Prometheus adds _seconds
// to the timer and _total to the counter.
const (
	taskWaitDurationMetric = "pveflow_task_wait_duration"
	taskPollsMetric        = "pveflow_task_polls"
)

// recordTaskWait records, by task type, a wait that has seen its task end: how long the task
// ran, from the start time in its UPID, and how many polls the wait took (this is the last).
func (a *Activities) recordTaskWait(ctx context.Context, task pve.UPIDInfo) {
	h := activity.GetMetricsHandler(ctx).WithTags(map[string]string{"task_type": task.Type})
	h.Timer(taskWaitDurationMetric).Record(a.now().Sub(time.Unix(task.StartTime, 0)))
	h.Counter(taskPollsMetric).Inc(int64(activity.GetInfo(ctx).Attempt))
}

// taskName is how a task type reads in messages.
func taskName(taskType string) string {
	switch taskType {
	case "qmclone":
		return "clone"
	case "imgcopy":
		return "upload"
	case "qmstart":
		return "start"
	case "qmstop":
		return "stop"
	case "hastart":
		return "HA start request"
	case "hastop":
		return "HA stop request"
	case "qmreboot":
		return "reboot"
	case "qmdestroy":
		return "destroy"
	case "imgdel":
		return "volume delete"
	}
	return taskType
}

func (a *Activities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// AgentRequest is the input of AgentNetworkInterfaces.
type AgentRequest struct {
	VMRef
	// WaitReady keeps the activity failing with a retryable NotReady error, which names what
	// is missing, until the guest reports on net0 every address of Addresses (see
	// proxy.Addresses.Missing): the static ones exactly, and a routable IPv4 for DHCP. Its JSON
	// name is from when only an IPv4 was waited for.
	WaitReady bool `json:"waitForIPv4,omitempty"`
	// MAC is net0's MAC address; the interface with it is preferred when picking the addresses.
	MAC string `json:"mac,omitempty"`
	// Addresses are net0's static addresses, as the seed's network-config gives them; empty is
	// DHCP's IPv4.
	Addresses proxy.Addresses `json:"addresses,omitzero"`
	// Pace spaces the looks of WaitReady, an agent that does not answer yet included; without
	// it, the retry policy does.
	Pace *Pace `json:"pace,omitempty"`
}

// AgentResult is what the guest agent reported.
type AgentResult struct {
	Interfaces []pve.AgentInterface `json:"interfaces"`
	// IPv4 is the guest's routable IPv4 address on net0, its static one when it has one, or
	// empty.
	IPv4 string `json:"ipv4,omitempty"`
	// IPv6 is net0's routable IPv6 address, its static one when it has one, or empty.
	IPv6 string `json:"ipv6,omitempty"`
	// Addresses are net0's routable addresses as "address/prefix-length".
	Addresses []string `json:"addresses,omitempty"`
}

// AgentNetworkInterfaces reads the guest's network interfaces from the QEMU guest agent. An agent
// that does not answer yet is a retryable AgentNotRunning error.
func (a *Activities) AgentNetworkInterfaces(ctx context.Context, req AgentRequest) (AgentResult, error) {
	req.annotate(ctx)
	ifaces, err := a.API.AgentNetworkInterfaces(ctx, req.Node, req.VMID)
	if err != nil {
		var next time.Duration
		if req.WaitReady && pve.Classify(err) == pve.AgentNotRunning {
			next = req.Pace.nextLook(a.now())
		}
		return AgentResult{}, failureLookingAgainIn("read guest network interfaces of "+req.VMRef.String(), err, next)
	}
	r := req.Addresses.Report(ifaces, req.MAC)
	res := AgentResult{Interfaces: ifaces, IPv4: r.IPv4, IPv6: r.IPv6, Addresses: r.Addresses}
	if missing := req.Addresses.Missing(ifaces, req.MAC); req.WaitReady && len(missing) > 0 {
		return res, notReady(ErrNotReady, req.Pace.nextLook(a.now()), "guest agent of %s does not report yet on net0 (MAC %s): %s", req.VMRef, cmp.Or(req.MAC, "unknown"), strings.Join(missing, ", "))
	}
	return res, nil
}

// CloudInitResultPath is where cloud-init writes its result once it has run all its stages in
// this boot (cloudinit/cmd/main.py status_wrapper, after modules-final). /run is a tmpfs, so the
// file is absent from every boot's start until cloud-init is done.
const CloudInitResultPath = "/run/cloud-init/result.json"

// CloudInitRequest is the input of CloudInitResult.
type CloudInitRequest struct {
	VMRef
	// Pace spaces the looks while cloud-init has not finished, or the agent does not answer
	// yet; without it, the retry policy does.
	Pace *Pace `json:"pace,omitempty"`
}

// CloudInitDone is what cloud-init's result says of a run that finished without errors.
type CloudInitDone struct {
	// Datasource is the datasource cloud-init used, as it names it: "DataSourceNoCloud
	// [seed=/dev/sr0]".
	Datasource string `json:"datasource"`
}

// cloudInitResult is /run/cloud-init/result.json: {"v1": {"datasource": ..., "errors": [...]}}.
type cloudInitResult struct {
	V1 *struct {
		Datasource string   `json:"datasource"`
		Errors     []string `json:"errors"`
	} `json:"v1"`
}

// CloudInitResult reads cloud-init's result through the guest agent (AgentFileRead of
// CloudInitResultPath), and is the one activity that reads a guest's file: what it returns is
// what the file says, never the file, so nothing of the guest lands in history but the
// datasource's name and cloud-init's errors. A file not there yet (cloud-init still runs) and an
// agent that does not answer yet are retryable, to be looked at again at the wait's pace; a
// result with errors is a Permanent failure whose message and details carry them: cloud-init
// will not run its stages again in this boot, so waiting on cannot fix it. cloud-init's errors
// name the module and exception that failed, not the user-data's text.
func (a *Activities) CloudInitResult(ctx context.Context, req CloudInitRequest) (CloudInitDone, error) {
	req.annotate(ctx)
	step := "read cloud-init's result of " + req.VMRef.String()
	content, err := a.API.AgentFileRead(ctx, req.Node, req.VMID, CloudInitResultPath)
	switch {
	case err != nil && cloudInitNotDone(err):
		return CloudInitDone{}, notReady(ErrNotReady, req.Pace.nextLook(a.now()), "cloud-init of %s has not finished yet: %s is not there", req.VMRef, CloudInitResultPath)
	case err != nil:
		var next time.Duration
		if pve.Classify(err) == pve.AgentNotRunning {
			next = req.Pace.nextLook(a.now())
		}
		return CloudInitDone{}, failureLookingAgainIn(step, err, next)
	}
	var r cloudInitResult
	if err := json.Unmarshal([]byte(content), &r); err != nil || r.V1 == nil {
		// A file being written is renamed into place whole (atomic_helper.write_json), so one
		// that does not parse is not cloud-init's: say so, without quoting it.
		return CloudInitDone{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %s is not cloud-init's result (%d bytes that are not {\"v1\": {...}})", step, CloudInitResultPath, len(content)), ErrPermanent, nil)
	}
	if len(r.V1.Errors) > 0 {
		return CloudInitDone{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("cloud-init of %s finished with %d error(s): %s", req.VMRef, len(r.V1.Errors), strings.Join(r.V1.Errors, "; ")),
			ErrPermanent, nil, CloudInitErrors{Errors: r.V1.Errors})
	}
	return CloudInitDone{Datasource: r.V1.Datasource}, nil
}

// CloudInitErrors is the detail of CloudInitResult's failure: cloud-init's errors, as its
// result lists them.
type CloudInitErrors struct {
	Errors []string `json:"errors"`
}

// cloudInitNotDone reports whether err is the agent's answer for a result.json that is not
// there: qemu-ga's file-open failing with ENOENT, which PVE passes on as "Agent error: ..."
// (qemu-server src/PVE/QemuServer/Agent.pm check_agent_error).
func cloudInitNotDone(err error) bool {
	// The text, not Message alone: PVE before 8.3 puts it in the reason phrase only. qemu-ga
	// says "failed to open file '<path>' (mode: 'r')" (qga/commands-posix.c guest_file_open); a
	// patch on its list had "Failed to open file '<path>'", so the case is not relied on.
	_, ok := errors.AsType[*pve.APIError](err)
	text := strings.ToLower(err.Error())
	return ok && strings.Contains(text, "agent error: failed to open file") && strings.Contains(text, "no such file or directory")
}

// StorageContentRequest is the input of StorageContent.
type StorageContentRequest struct {
	StorageRef
	// Content is the content type to list ("iso", "images", ...); empty lists every volume.
	Content string `json:"content,omitempty"`
}

// StorageContent lists the volumes of a storage on a node.
func (a *Activities) StorageContent(ctx context.Context, req StorageContentRequest) ([]pve.StorageVolume, error) {
	req.annotate(ctx)
	vs, err := a.API.StorageContent(ctx, req.Node, req.Storage, req.Content)
	if err != nil {
		return nil, failure(fmt.Sprintf("list content of storage %s on node %s", req.Storage, req.Node), err)
	}
	return vs, nil
}

// NodeTasksRequest is the input of NodeTasks.
type NodeTasksRequest struct {
	Node string `json:"node"`
	// Source is "archive", "active" or "all"; empty is PVE's default, archive.
	Source string `json:"source,omitempty"`
	// TypeFilter keeps one type of task, such as "qmclone".
	TypeFilter string `json:"typeFilter,omitempty"`
	// Limit is how many to list; 0 is PVE's 50.
	Limit int `json:"limit,omitempty"`
}

// NodeTasks lists a node's tasks, newest first.
func (a *Activities) NodeTasks(ctx context.Context, req NodeTasksRequest) ([]pve.TaskListEntry, error) {
	telemetry.PVETarget{Node: req.Node}.Annotate(ctx)
	ts, err := a.API.NodeTasks(ctx, req.Node, pve.TaskListParams{Source: req.Source, TypeFilter: req.TypeFilter, Limit: req.Limit})
	if err != nil {
		return nil, failure("list the tasks of node "+req.Node, err)
	}
	return ts, nil
}

// DeleteVolumeRequest is the input of DeleteVolume.
type DeleteVolumeRequest struct {
	StorageRef
	// VolID is the full volume ID, such as "local:iso/proxy-abc-seed.iso".
	VolID string `json:"volid"`
}

// DeleteVolume starts deleting a volume and returns the task, or an empty UPID when Proxmox
// finished within the request.
func (a *Activities) DeleteVolume(ctx context.Context, req DeleteVolumeRequest) (pve.UPID, error) {
	req.annotate(ctx)
	return startTask(ctx, fmt.Sprintf("delete volume %s on node %s", req.VolID, req.Node), func() (pve.UPID, error) { return a.API.DeleteVolume(ctx, req.Node, req.Storage, req.VolID) })
}

// startTask makes call, which starts a Proxmox task, and puts the task on the activity's span.
// A failed call is the failure of step.
func startTask(ctx context.Context, step string, call func() (pve.UPID, error)) (pve.UPID, error) {
	upid, err := call()
	if err != nil {
		return "", failure(step, err)
	}
	telemetry.PVETarget{UPID: upid}.Annotate(ctx)
	return upid, nil
}
