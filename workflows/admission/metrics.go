package admission

// Metrics the workflows record through workflow.GetMetricsHandler, which records nothing while
// a workflow replays. Prometheus adds _total to counters and _seconds to timers; the names here
// are the instruments'. docs/operations.md lists them as Prometheus shows them.
const (
	clonesQueuedMetric  = "pveflow_clones_queued"
	clonesRunningMetric = "pveflow_clones_running"
)
