package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"
)

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

// ObserverState is what an observer carries from run to run.
type ObserverState struct {
	// Watched are the VMs it watches, by proxy UID.
	Watched map[string]WatchedVM `json:"watched,omitempty"`
	// Listings and Wakes count the listings made and the entities woken since it first started.
	Listings int `json:"listings,omitempty"`
	Wakes    int `json:"wakes,omitempty"`
	// ListedAt is when the last listing was made, and LastError why it failed, if it did.
	ListedAt  time.Time `json:"listedAt,omitzero"`
	LastError string    `json:"lastError,omitempty"`
}

// WatchedVM is a VM an observer watches.
type WatchedVM struct {
	VMID int `json:"vmid"`
	// Seen is the fingerprint of its entry at the last listing (activities.Fingerprint), 0
	// before the first since the entity asked.
	Seen uint32 `json:"seen,omitempty"`
}

// ObserverStatus is the answer of ObserverQuery.
type ObserverStatus struct {
	ObserverState
	Watching int `json:"watching"`
}

// Observer watches the VMs of the proxies of one cluster (see above). It runs as long as its
// entities ask it to watch, and continues as new when its history grows long, carrying what it
// watches.
func (w *Workflows) Observer(ctx workflow.Context, st ObserverState) error {
	o := &observer{ctx: ctx, st: st}
	if o.st.Watched == nil {
		o.st.Watched = make(map[string]WatchedVM)
	}
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return settingsOf(w.Config) }).Get(&o.s); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, ObserverQuery, func() (ObserverStatus, error) {
		return ObserverStatus{ObserverState: o.st, Watching: len(o.st.Watched)}, nil
	}); err != nil {
		return err
	}
	watches := workflow.GetSignalChannel(ctx, WatchSignal)
	interval := max(o.s.Entity.CheckInterval, time.Second)
	for {
		listing := workflow.NewTimer(ctx, interval)
		listed := false
		for !listed {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(watches, func(c workflow.ReceiveChannel, _ bool) {
				var req WatchRequest
				c.Receive(ctx, &req)
				o.watch(req)
			})
			sel.AddFuture(listing, func(workflow.Future) { listed = true })
			sel.Select(ctx)
			if ctx.Err() != nil {
				// Cancelled, it stops: the next entity's word starts another.
				return temporal.NewCanceledError()
			}
		}
		o.observe()
		if info := workflow.GetInfo(ctx); info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= o.s.Entity.HistoryEvents {
			for {
				var req WatchRequest
				if !watches.ReceiveAsync(&req) {
					break
				}
				o.watch(req)
			}
			return workflow.NewContinueAsNewError(ctx, ObserverName, o.st)
		}
	}
}

type observer struct {
	ctx workflow.Context
	s   settings
	st  ObserverState
}

// watch takes an entity's word: the VM to watch from the next listing on, as the normal.
func (o *observer) watch(req WatchRequest) {
	if req.VMID == 0 {
		delete(o.st.Watched, req.UID)
		return
	}
	o.st.Watched[req.UID] = WatchedVM{VMID: req.VMID}
}

// observe lists the cluster once and wakes the entities whose VMs need a look. An entity that
// does not run any more is watched no more.
func (o *observer) observe() {
	uids := workflow.DeterministicKeys(o.st.Watched)
	if len(uids) == 0 {
		return
	}
	byVMID := make(map[int][]string, len(uids))
	req := activities.ObserveRequest{VMIDs: make([]int, 0, len(uids)), Seen: make([]uint32, 0, len(uids))}
	for _, uid := range uids {
		w := o.st.Watched[uid]
		if len(byVMID[w.VMID]) == 0 {
			req.VMIDs = append(req.VMIDs, w.VMID)
			req.Seen = append(req.Seen, w.Seen)
		}
		byVMID[w.VMID] = append(byVMID[w.VMID], uid)
	}
	var a *activities.Activities
	var changes []activities.VMChange
	step := "list the cluster's VMs"
	err := execute(o.ctx, workflow.ActivityOptions{
		StartToCloseTimeout: o.s.Budgets.Request,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: o.s.Poll.InitialInterval, MaximumAttempts: 2},
		Summary:             step,
	}, a.ObserveVMs, req).Get(o.ctx, &changes)
	o.st.Listings++
	o.st.ListedAt = workflow.Now(o.ctx)
	if err != nil {
		// The next listing comes at the next interval; the entities' backstops cover a cluster
		// that stays unreadable.
		o.st.LastError = fail(step, err).Error()
		workflow.GetLogger(o.ctx).Warn("observer: listing failed", "error", err)
		return
	}
	o.st.LastError = ""
	for _, c := range changes {
		for _, uid := range byVMID[c.VMID] {
			w := o.st.Watched[uid]
			w.Seen = c.Fingerprint
			o.st.Watched[uid] = w
			if c.Why != "" {
				o.wake(uid, Look{VMID: c.VMID, Why: c.Why})
			}
		}
	}
}

// wake tells an entity to look at its VM. One that does not run is watched no more: it was
// deleted, or closed.
func (o *observer) wake(uid string, look Look) {
	err := signalRun(o.ctx, o.s, ProxyWorkflowID(uid), LookSignal, look)
	switch {
	case isType(err, activities.ErrNotFound):
		delete(o.st.Watched, uid)
	case err != nil:
		workflow.GetLogger(o.ctx).Warn("observer: could not wake an entity", "uid", uid, "error", err)
	default:
		o.st.Wakes++
	}
}
