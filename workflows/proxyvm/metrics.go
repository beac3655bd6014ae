package proxyvm

import (
	"errors"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/workflows/core"
)

// Metrics the workflows record through workflow.GetMetricsHandler, which records nothing while
// a workflow replays. Prometheus adds _total to counters and _seconds to timers; the names here
// are the instruments'. docs/operations.md lists them as Prometheus shows them.
const (
	proxiesCreatedMetric = "pveflow_proxies_created"
	proxiesDeletedMetric = "pveflow_proxies_deleted"
	proxiesChangedMetric = "pveflow_proxies_changed"
	createDurationMetric = "pveflow_proxy_create_duration"
	deleteDurationMetric = "pveflow_proxy_delete_duration"
	changeDurationMetric = "pveflow_proxy_change_duration"
	proxyChecksMetric    = "pveflow_proxy_checks"
	proxyHealsMetric     = "pveflow_proxy_heals"
)

// Outcomes of a CreateProxy, ChangeProxy or DeleteProxy, as the workflow itself ends. A run that is
// terminated or times out ends without running workflow code, and records nothing.
const (
	outcomeCompleted = "completed"
	outcomeFailed    = "failed"
	outcomeCanceled  = "canceled"
)

// operationMetrics names an operation, its counter and its timer.
type operationMetrics struct{ op, count, duration string }

var (
	createMetrics = operationMetrics{op: "create", count: proxiesCreatedMetric, duration: createDurationMetric}
	deleteMetrics = operationMetrics{op: "delete", count: proxiesDeletedMetric, duration: deleteDurationMetric}
	changeMetrics = operationMetrics{op: "change", count: proxiesChangedMetric, duration: changeDurationMetric}
)

// recordOutcome counts the run's end by outcome and failure type, records by outcome how long
// the run took since it started, and logs it at info: the one info line of an operation, with
// the proxy's UID and, once t knows it, the VM's VMID and node. It is deferred with the run's
// error, so every return is counted. t is nil when the run ended before it had one.
func recordOutcome(ctx workflow.Context, m operationMetrics, uid string, t *core.Tracker, err error) {
	outcome, failureType := outcomeOf(err)
	took := workflow.Now(ctx).Sub(workflow.GetInfo(ctx).WorkflowStartTime)
	h := workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"outcome": outcome})
	h.WithTags(map[string]string{"failure_type": failureType}).Counter(m.count).Inc(1)
	h.Timer(m.duration).Record(took)

	attrs := []any{"uid", uid, "duration", took}
	if t != nil && t.Status.VMID != 0 {
		attrs = append(attrs, "vmid", t.Status.VMID, "node", t.Status.Node)
	}
	if err != nil {
		attrs = append(attrs, "failureType", failureType, "error", err)
	}
	workflow.GetLogger(ctx).Info(m.op+" "+outcome, attrs...)
}

// outcomeOf is how a run that returns err ended, and for a failure its type (Permanent,
// Transient, QuotaExceeded, ...), which is empty otherwise.
func outcomeOf(err error) (outcome, failureType string) {
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return outcomeCompleted, ""
	case temporal.IsCanceledError(err):
		return outcomeCanceled, ""
	case errors.As(err, &appErr):
		return outcomeFailed, appErr.Type()
	}
	return outcomeFailed, "Unclassified"
}

// recordCheck counts an entity's check of its VM by what it found: the VM's state in lower
// case (running, provisioning, stopped, unknown), absent when the proxy has no VM, error when
// the check failed.
func recordCheck(ctx workflow.Context, got GetProxyResult, err error) {
	found := strings.ToLower(string(got.State))
	switch {
	case core.IsType(err, core.FailNotFound):
		found = "absent"
	case err != nil:
		found = "error"
	}
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"found": found}).Counter(proxyChecksMetric).Inc(1)
}

// recordHeal counts an operation a check started (a create of a VM found stopped or gone, a
// change putting drift back) by its kind and how it closed.
func recordHeal(ctx workflow.Context, rec OperationRecord) {
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"kind": rec.Kind, "outcome": rec.Outcome}).Counter(proxyHealsMetric).Inc(1)
}
