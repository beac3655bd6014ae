package e2e_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The colliding-proxies test: 20 proxies whose probe sequences overlap, created and deleted in
// random interleavings of requests to their entities against a real Temporal server. It checks
// the end state (the last request of each proxy wins) and that no proxy's workflow ever wrote
// to, started, stopped or destroyed a VM, or uploaded or deleted an ISO, that was not provably
// its own.
const (
	// collidingProxies is how many proxies take part.
	collidingProxies = 20
	// collideRangeWidth narrows the VMID range, so that the probes of 20 proxies crowd together
	// while a clone outside a proxy's 32 probes is still detectable.
	collideRangeWidth = 40
	// collideHomeOffset and collideHomeWindow: every chosen UID's home VMID is one of the
	// collideHomeWindow VMIDs starting collideHomeOffset above the range's minimum.
	collideHomeOffset = 10
	collideHomeWindow = 4
	// probeCount is how many VMIDs of its probe sequence a create may clone onto.
	probeCount = 32
	// ownershipWait bounds how long the test waits for one proxy's workflows to close.
	ownershipWait = 2 * time.Minute
	// seedEnv overrides the interleavings' seed: a number, or "random".
	seedEnv = "PVEFLOW_E2E_SEED"
	// defaultInterleavingSeed makes the schedule the same on every run unless seedEnv is set.
	defaultInterleavingSeed = 20260101
)

func TestE2E_collidingProxiesCreateAndDeleteInRandomInterleavings(t *testing.T) {
	seed := interleavingSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0x0c011de5))
	cloneTime := time.Second + time.Duration(rng.IntN(2001))*time.Millisecond
	t.Logf("seed %d (reproduce the schedule with %s=%d); clones take %v", seed, seedEnv, seed, cloneTime)

	cluster := newCluster(func(o *pvesim.Options) {
		o.TaskDurations = map[string]time.Duration{"qmclone": cloneTime}
		o.AgentBootDelay = 500 * time.Millisecond
	})
	cfg := fastConfig(t)
	r := config.VMIDRange{Min: cfg.Proxmox.VMIDRange.Min, Max: cfg.Proxmox.VMIDRange.Min + collideRangeWidth - 1}
	cfg.Proxmox.VMIDRange = r
	require.NoError(t, cfg.Validate())

	uids := collidingUIDs(t, r)
	guard := newOwnershipGuard(cluster, r)
	s := startStack(t, guard, cfg)

	plans := planInterleavings(rng, uids)
	for _, p := range plans {
		t.Logf("plan %-14s home %d: %s", p.uid, proxy.VMIDFor(p.uid, r, 0), p.describe())
	}

	t0 := time.Now()
	guard.setStart(t0)
	var wg sync.WaitGroup
	for i := range plans {
		wg.Go(func() { plans[i].run(s.starter, t0) })
	}
	wg.Wait()
	t.Logf("all workflows closed after %v; %d Clone calls for %d proxies", time.Since(t0).Round(time.Millisecond), cluster.CallCount("Clone"), len(plans))
	for _, p := range plans {
		t.Logf("ran  %-14s: %s", p.uid, p.outcome())
	}

	checkOutcome(t, cluster, cfg, plans)

	violations := guard.all()
	if len(violations) > 0 {
		t.Errorf("%d call(s) touched a VM or ISO that was not provably the caller's own:\n  %s",
			len(violations), strings.Join(violations, "\n  "))
	}
}

// interleavingSeed is the seed of the schedule: seedEnv's number, a fresh one for "random", or
// the default.
func interleavingSeed(t *testing.T) uint64 {
	t.Helper()
	v := os.Getenv(seedEnv)
	switch v {
	case "":
		return defaultInterleavingSeed
	case "random":
		return uint64(time.Now().UnixNano())
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	require.NoError(t, err, "%s must be a number or \"random\"", seedEnv)
	return seed
}

// collidingUIDs picks, deterministically, the first collidingProxies UIDs "collide-NNNN" whose
// home VMIDs fall into a window of collideHomeWindow VMIDs, and checks that their probe
// sequences really overlap.
func collidingUIDs(t *testing.T, r config.VMIDRange) []string {
	t.Helper()
	lo := r.Min + collideHomeOffset
	var uids []string
	for i := 0; len(uids) < collidingProxies; i++ {
		require.Less(t, i, 100000, "no %d UIDs with a home in %d..%d", collidingProxies, lo, lo+collideHomeWindow-1)
		u := fmt.Sprintf("collide-%04d", i)
		if home := proxy.VMIDFor(u, r, 0); home >= lo && home < lo+collideHomeWindow {
			require.NoError(t, proxy.ValidateUID(u))
			uids = append(uids, u)
		}
	}

	sameHome, inFirstProbes := 0, 0
	homes := map[int]int{}
	for i, a := range uids {
		homes[proxy.VMIDFor(a, r, 0)]++
		for j, b := range uids {
			if i == j {
				continue
			}
			if j > i && proxy.VMIDFor(a, r, 0) == proxy.VMIDFor(b, r, 0) {
				sameHome++
			}
			for k := range 3 {
				if proxy.VMIDFor(a, r, 0) == proxy.VMIDFor(b, r, k) {
					inFirstProbes++ // a's home is among b's first 3 probes
					break
				}
			}
		}
	}
	t.Logf("UIDs %s..%s: homes %v; %d pairs share a home VMID; %d ordered pairs have one's home among the other's first 3 probes",
		uids[0], uids[len(uids)-1], homes, sameHome, inFirstProbes)
	require.GreaterOrEqual(t, sameHome, 20, "the UIDs must share home VMIDs")
	require.GreaterOrEqual(t, inFirstProbes, 60, "the UIDs' first probes must overlap")
	return uids
}

type opKind string

const (
	opCreate opKind = "create"
	opDelete opKind = "delete"
)

// op is one planned request of a proxy and, once sent, what came of it.
type op struct {
	kind opKind
	// gap is the wait before sending it: after the plan's offset for the first op, after the
	// entity accepted the previous one for the others.
	gap time.Duration

	startedAt time.Duration // since t0
	startErr  error
	req       *starter.Request
	closedAt  time.Duration
	err       error
	created   proxyvm.CreateProxyResult
	deleted   proxyvm.DeleteProxyResult
}

// plan is one proxy's schedule.
type plan struct {
	uid    string
	offset time.Duration
	ops    []*op
}

// planInterleavings gives every proxy one of four schedules (each used equally often, assigned
// at random) with random delays: creates only, create then delete, delete then create, and
// create, delete, create again.
func planInterleavings(rng *rand.Rand, uids []string) []*plan {
	schedules := [][]opKind{
		{opCreate},
		{opCreate, opDelete},
		{opDelete, opCreate},
		{opCreate, opDelete, opCreate},
	}
	perm := rng.Perm(len(uids))
	plans := make([]*plan, len(uids))
	for i, u := range uids {
		p := &plan{uid: u, offset: randDuration(rng, 0, 2*time.Second)}
		for j, kind := range schedules[perm[i]%len(schedules)] {
			o := &op{kind: kind}
			if j > 0 {
				o.gap = randGap(rng)
			}
			p.ops = append(p.ops, o)
		}
		plans[i] = p
	}
	return plans
}

// randGap is the delay between two operations of a proxy: at once (before the first op has
// done anything), while a create is likely cloning, or once a create has likely moved on.
func randGap(rng *rand.Rand) time.Duration {
	switch rng.IntN(3) {
	case 0:
		return randDuration(rng, 0, 300*time.Millisecond)
	case 1:
		return randDuration(rng, 500*time.Millisecond, 3*time.Second)
	default:
		return randDuration(rng, 3*time.Second, 7*time.Second)
	}
}

func randDuration(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// last is the proxy's last request: the entity serves it after the ones before, or supersedes
// them with it.
func (p *plan) last() *op { return p.ops[len(p.ops)-1] }

// survives is whether the proxy should exist at the end: its last request wins.
func (p *plan) survives() bool { return p.last().kind == opCreate }

func (p *plan) describe() string {
	parts := []string{fmt.Sprintf("after %v", p.offset.Round(time.Millisecond))}
	for i, o := range p.ops {
		if i > 0 {
			parts = append(parts, fmt.Sprintf("(+%v)", o.gap.Round(time.Millisecond)))
		}
		parts = append(parts, string(o.kind))
	}
	want := "gone"
	if p.survives() {
		want = "survives"
	}
	return strings.Join(parts, " ") + " => " + want
}

// run sends the plan's requests to the proxy's entity one after another, each once the entity
// accepted the previous one, and then waits for every one of them to be served or superseded.
func (p *plan) run(c *starter.Client, t0 time.Time) {
	time.Sleep(p.offset)
	for i, o := range p.ops {
		if i > 0 {
			time.Sleep(o.gap)
		}
		o.startedAt = time.Since(t0)
		if o.kind == opCreate {
			o.req, o.startErr = c.Create(context.Background(), createInput(p.uid))
		} else {
			o.req, o.startErr = c.Delete(context.Background(), proxyvm.DeleteProxyInput{UID: p.uid})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), ownershipWait)
	defer cancel()
	for _, o := range p.ops {
		if o.req == nil {
			continue
		}
		if o.kind == opCreate {
			o.err = o.req.Get(ctx, &o.created)
		} else {
			o.err = o.req.Get(ctx, &o.deleted)
		}
		o.closedAt = time.Since(t0)
	}
}

func (p *plan) outcome() string {
	var parts []string
	for _, o := range p.ops {
		s := fmt.Sprintf("%s@%v", o.kind, o.startedAt.Round(time.Millisecond))
		if o.startErr != nil {
			s += " NOT SENT: " + shorten(o.startErr.Error())
			parts = append(parts, s)
			continue
		}
		s += fmt.Sprintf(" closed@%v ", o.closedAt.Round(time.Millisecond))
		switch {
		case o.err != nil:
			s += "error: " + shorten(o.err.Error())
		case o.kind == opCreate:
			s += fmt.Sprintf("ok vmid %d", o.created.VMID)
		default:
			destroyed := make([]int, len(o.deleted.Destroyed))
			for i, v := range o.deleted.Destroyed {
				destroyed[i] = v.VMID
			}
			s += fmt.Sprintf("ok destroyed %v", destroyed)
			if len(o.deleted.Skipped) > 0 {
				s += fmt.Sprintf(" skipped %v", o.deleted.Skipped)
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func shorten(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// checkOutcome checks the cluster against the plans: each survivor has exactly one VM, its own,
// unlocked, the one its last create returned; nothing of a deleted proxy is left; and there is
// nothing else besides the template.
func checkOutcome(t *testing.T, cluster *pvesim.Cluster, cfg config.Config, plans []*plan) {
	t.Helper()
	vms := cluster.VMs()
	byUID := map[string][]pvesim.VM{}
	for _, v := range vms {
		if mark, managed := proxy.ParseDescription(v.Config["description"]); managed {
			byUID[mark.UID] = append(byUID[mark.UID], v)
		}
	}
	isos := map[string]bool{}
	existing := map[int]bool{}
	for _, v := range vms {
		existing[v.VMID] = true
	}
	for _, vol := range cluster.Volumes() {
		if _, name, ok := strings.Cut(vol.VolID, ":iso/"); ok {
			isos[name] = true
			continue
		}
		if owner := diskOwner(vol.VolID); owner != 0 && !existing[owner] {
			t.Errorf("disk %s is left behind by VM %d, which is gone", vol.VolID, owner)
		}
	}

	expected := map[int]bool{cfg.Proxmox.Templates["debian13"].VMID: true}
	for _, p := range plans {
		for _, o := range p.ops[:len(p.ops)-1] {
			if o.err != nil && starter.FailureType(o.err) != starter.FailSuperseded {
				t.Errorf("%s: a %s request before its last failed other than superseded: %v", p.uid, o.kind, o.err)
			}
		}
		last := p.last()
		seedISO := proxy.SeedISOName(proxy.NameFromUID(p.uid))
		if last.startErr != nil {
			t.Errorf("%s: its last request (%s) could not be sent: %v", p.uid, last.kind, last.startErr)
			continue
		}
		if !p.survives() {
			if last.err != nil {
				t.Errorf("%s: its last request, a delete, failed: %v", p.uid, last.err)
			}
			for _, v := range byUID[p.uid] {
				t.Errorf("%s was deleted last, but VM %d on %s still carries its mark (lock %q)", p.uid, v.VMID, v.Node, v.Config["lock"])
			}
			if isos[seedISO] {
				t.Errorf("%s was deleted last, but its seed ISO %s is still there", p.uid, seedISO)
			}
			continue
		}
		if last.err != nil {
			t.Errorf("%s: its last request, a create, failed: %v", p.uid, last.err)
		}
		ours := byUID[p.uid]
		if len(ours) != 1 {
			ids := make([]int, len(ours))
			for i, v := range ours {
				ids[i] = v.VMID
			}
			t.Errorf("%s was created last: want exactly one VM with its mark, found %v", p.uid, ids)
		}
		for _, v := range ours {
			expected[v.VMID] = true
			if lock := v.Config["lock"]; lock != "" {
				t.Errorf("%s: its VM %d is still locked (%q)", p.uid, v.VMID, lock)
			}
		}
		if last.err == nil {
			v, ok := vmByID(vms, last.created.VMID)
			mark, managed := proxy.ParseDescription(v.Config["description"])
			switch {
			case !ok:
				t.Errorf("%s: its create returned VM %d, which does not exist", p.uid, last.created.VMID)
			case !managed || mark.UID != p.uid:
				t.Errorf("%s: its create returned VM %d, which carries the mark of %q (managed %v)", p.uid, v.VMID, mark.UID, managed)
			}
		}
	}
	for _, v := range vms {
		if expected[v.VMID] {
			continue
		}
		mark, managed := proxy.ParseDescription(v.Config["description"])
		t.Errorf("VM %d on %s should not exist: name %q, mark of %q (managed %v), lock %q",
			v.VMID, v.Node, v.Config["name"], mark.UID, managed, v.Config["lock"])
	}
}

func vmByID(vms []pvesim.VM, vmid int) (pvesim.VM, bool) {
	i := slices.IndexFunc(vms, func(v pvesim.VM) bool { return v.VMID == vmid })
	if i < 0 {
		return pvesim.VM{}, false
	}
	return vms[i], true
}

// diskOwner is the VMID in a disk volume's ID, "<storage>:vm-<vmid>-disk-N"; 0 for anything else.
func diskOwner(volid string) int {
	_, name, _ := strings.Cut(volid, ":")
	rest, ok := strings.CutPrefix(name, "vm-")
	if !ok {
		return 0
	}
	id, _, _ := strings.Cut(rest, "-")
	n, _ := strconv.Atoi(id)
	return n
}

// ownershipGuard is a pve.API that records every mutating call a proxy's workflow makes on
// something that is not provably that proxy's own: a VM without its mark (another proxy's, an
// unmarked one, or a clone still in progress whose mark is not written yet), a clone outside
// its probe sequence or without its mark, an ISO with another name than its seed ISO's. It
// checks against the simulator's state before forwarding the call.
type ownershipGuard struct {
	pve.API
	cluster   *pvesim.Cluster
	vmidRange config.VMIDRange

	mu         sync.Mutex
	t0         time.Time
	violations []string
}

var _ pve.API = (*ownershipGuard)(nil)

func newOwnershipGuard(c *pvesim.Cluster, r config.VMIDRange) *ownershipGuard {
	return &ownershipGuard{API: c, cluster: c, vmidRange: r, t0: time.Now()}
}

func (g *ownershipGuard) setStart(t0 time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.t0 = t0
}

func (g *ownershipGuard) all() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.violations)
}

func (g *ownershipGuard) violation(workflowID, format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.violations = append(g.violations, fmt.Sprintf("@%v %s: ", time.Since(g.t0).Round(time.Millisecond), workflowID)+fmt.Sprintf(format, args...))
}

// caller is the workflow making the call and its proxy's UID, from the activity context.
func (g *ownershipGuard) caller(ctx context.Context) (workflowID, uid string, ok bool) {
	if !activity.IsActivity(ctx) {
		return "", "", false
	}
	workflowID = activity.GetInfo(ctx).WorkflowExecution.ID
	rest, ok := strings.CutPrefix(workflowID, "proxy/")
	if !ok {
		return workflowID, "", false
	}
	uid, _, ok = strings.Cut(rest, "/")
	return workflowID, uid, ok
}

// checkVM records a violation unless VM vmid is absent or carries the caller's mark.
func (g *ownershipGuard) checkVM(ctx context.Context, method string, vmid int) {
	wf, uid, ok := g.caller(ctx)
	if !ok {
		return
	}
	v, found := vmByID(g.cluster.VMs(), vmid)
	if !found {
		return
	}
	mark, managed := proxy.ParseDescription(v.Config["description"])
	switch {
	case managed && mark.UID == uid:
	case managed:
		g.violation(wf, "%s VM %d, which carries the mark of %s (lock %q)", method, vmid, mark.UID, v.Config["lock"])
	case v.Config["lock"] == "clone":
		g.violation(wf, "%s VM %d, a clone in progress that carries no mark yet", method, vmid)
	default:
		g.violation(wf, "%s VM %d, which carries no mark (name %q, lock %q)", method, vmid, v.Config["name"], v.Config["lock"])
	}
}

// checkISO records a violation unless volume name is the caller's seed ISO.
func (g *ownershipGuard) checkISO(ctx context.Context, method, name string) {
	wf, uid, ok := g.caller(ctx)
	if !ok {
		return
	}
	if want := proxy.SeedISOName(proxy.NameFromUID(uid)); name != want {
		g.violation(wf, "%s ISO %q, not its own seed ISO %q", method, name, want)
	}
}

func (g *ownershipGuard) Clone(ctx context.Context, node string, vmid int, params pve.CloneParams) (pve.UPID, error) {
	if wf, uid, ok := g.caller(ctx); ok {
		probes := make([]int, probeCount)
		for k := range probes {
			probes[k] = proxy.VMIDFor(uid, g.vmidRange, k)
		}
		if !slices.Contains(probes, params.NewID) {
			g.violation(wf, "Clone onto VM %d, outside its first %d probes %v", params.NewID, probeCount, probes)
		}
		if mark, managed := proxy.ParseDescription(params.Description); !managed || mark.UID != uid {
			g.violation(wf, "Clone onto VM %d with the mark of %q (managed %v)", params.NewID, mark.UID, managed)
		}
	}
	return g.API.Clone(ctx, node, vmid, params)
}

func (g *ownershipGuard) SetVMConfig(ctx context.Context, node string, vmid int, params pve.VMConfig) error {
	g.checkVM(ctx, "SetVMConfig", vmid)
	return g.API.SetVMConfig(ctx, node, vmid, params)
}

func (g *ownershipGuard) Resize(ctx context.Context, node string, vmid int, disk, size string) (pve.UPID, error) {
	g.checkVM(ctx, "Resize", vmid)
	return g.API.Resize(ctx, node, vmid, disk, size)
}

func (g *ownershipGuard) Start(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	g.checkVM(ctx, "Start", vmid)
	return g.API.Start(ctx, node, vmid)
}

func (g *ownershipGuard) Stop(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	g.checkVM(ctx, "Stop", vmid)
	return g.API.Stop(ctx, node, vmid)
}

func (g *ownershipGuard) Destroy(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	g.checkVM(ctx, "Destroy", vmid)
	return g.API.Destroy(ctx, node, vmid)
}

func (g *ownershipGuard) UploadISO(ctx context.Context, node, storage, filename string, r io.Reader, size int64) (pve.UPID, error) {
	g.checkISO(ctx, "UploadISO", filename)
	return g.API.UploadISO(ctx, node, storage, filename, r, size)
}

func (g *ownershipGuard) DeleteVolume(ctx context.Context, node, storage, volid string) (pve.UPID, error) {
	name := volid
	if _, after, ok := strings.Cut(volid, ":"); ok {
		name = after
	}
	g.checkISO(ctx, "DeleteVolume", strings.TrimPrefix(name, "iso/"))
	return g.API.DeleteVolume(ctx, node, storage, volid)
}
