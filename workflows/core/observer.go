package core

// Observer. Watching a fleet one VM at a time costs every proxy a check per interval: a GetProxy
// child, three Proxmox calls (one of them the cluster's whole list), 28 history events and 5
// workflow tasks, so the cost of watching grows with the fleet times the cluster. One Observer
// workflow per cluster (per task queue, as the workers serving it share one configuration)
// lists the cluster's VMs once per entity.checkInterval, as a Kubernetes informer does, and
// wakes only the entities whose VM is not listed, looks wrong (not running, locked) or whose
// entry changed since the last listing; only those read their VM (config, status, guest agent).
// A proxy with nothing new costs no workflow task and no Proxmox call.
//
// The entities tell the observer what to watch: the VMID of a present proxy's VM, sent after
// every operation and every check that finds it elsewhere (the observer takes its next listing
// of that VM as the new normal: the operation changed it), and nothing once it is deleted. They
// send it by signal-with-start, so the first entity of a cluster starts its observer, and one
// that died (terminated, its history reset) comes back at the next entity's word. An entity
// watched by an observer checks itself only every entity.backstopInterval (and at once when the
// observer wakes it): an observer that stopped cannot leave a proxy unwatched for longer. An
// entity whose word did not reach one checks itself every interval, as before observers.
//
// The listing is PVE's cache (/cluster/resources), which lags: it wakes, it never decides. The
// woken entity reads its VM before it acts.

// ObserverName is the workflow type of an observer; it is recorded in histories.
const ObserverName = "Observer"

// The signals and the query of an Observer, and the signal it wakes an entity with.
const (
	// WatchSignal tells an observer to watch a proxy's VM (a WatchRequest).
	WatchSignal = "watch"
	// ObserverQuery answers the observer's ObserverStatus.
	ObserverQuery = "status"
	// LookSignal wakes a Proxy entity to check its VM now (a Look).
	LookSignal = "look"
)

// ObserverWorkflowID is the workflow ID of the observer of the cluster that the workers polling
// taskQueue serve.
func ObserverWorkflowID(taskQueue string) string { return "observer/" + taskQueue }

// WatchRequest tells an observer to watch the VM of proxy UID, or, with VMID 0, to stop.
type WatchRequest struct {
	UID  string `json:"uid"`
	VMID int    `json:"vmid,omitempty"`
}

// Look is what an observer saw of an entity's VM.
type Look struct {
	VMID int    `json:"vmid"`
	Why  string `json:"why"`
}
