package fleet

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/activities"

	"github.com/pveflow/pveflow/workflows/core"
)

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
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return core.SettingsOf(w.Config) }).Get(&o.s); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, core.ObserverQuery, func() (ObserverStatus, error) {
		return ObserverStatus{ObserverState: o.st, Watching: len(o.st.Watched)}, nil
	}); err != nil {
		return err
	}
	watches := workflow.GetSignalChannel(ctx, core.WatchSignal)
	interval := max(o.s.Entity.CheckInterval, time.Second)
	for {
		listing := workflow.NewTimer(ctx, interval)
		listed := false
		for !listed {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(watches, func(c workflow.ReceiveChannel, _ bool) {
				var req core.WatchRequest
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
				var req core.WatchRequest
				if !watches.ReceiveAsync(&req) {
					break
				}
				o.watch(req)
			}
			return workflow.NewContinueAsNewError(ctx, core.ObserverName, o.st)
		}
	}
}

type observer struct {
	ctx workflow.Context
	s   core.Settings
	st  ObserverState
}

// watch takes an entity's word: the VM to watch from the next listing on, as the normal.
func (o *observer) watch(req core.WatchRequest) {
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
	err := core.Execute(o.ctx, workflow.ActivityOptions{
		StartToCloseTimeout: o.s.Budgets.Request,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: o.s.Poll.InitialInterval, MaximumAttempts: 2},
		Summary:             step,
	}, a.ObserveVMs, req).Get(o.ctx, &changes)
	o.st.Listings++
	o.st.ListedAt = workflow.Now(o.ctx)
	if err != nil {
		// The next listing comes at the next interval; the entities' backstops cover a cluster
		// that stays unreadable.
		o.st.LastError = core.Fail(step, err).Error()
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
				o.wake(uid, core.Look{VMID: c.VMID, Why: c.Why})
			}
		}
	}
}

// wake tells an entity to look at its VM. One that does not run is watched no more: it was
// deleted, or closed.
func (o *observer) wake(uid string, look core.Look) {
	err := core.SignalRun(o.ctx, o.s, core.ProxyWorkflowID(uid), core.LookSignal, look)
	switch {
	case core.IsType(err, activities.ErrNotFound):
		delete(o.st.Watched, uid)
	case err != nil:
		workflow.GetLogger(o.ctx).Warn("observer: could not wake an entity", "uid", uid, "error", err)
	default:
		o.st.Wakes++
	}
}
