package pvesim

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/pveflow/pveflow/internal/pve"
)

// Call is one call of a pve.API method, as the call log records it.
type Call struct {
	// Method is the pve.API method's name, such as "Clone".
	Method string
	// Node is the node in the call's path; empty for cluster-wide calls.
	Node string
	// VMID is the VM the call names (for Clone the template); 0 for calls about no VM.
	VMID int
}

// faults are the test knobs; the Cluster's mutex guards them.
type faults struct {
	calls      []Call
	blocks     map[string]chan struct{}
	failNext   map[string][]error
	failTask   map[string][]string
	stallClone map[int]bool
	crashClone map[int]bool
	leakClone  map[int]bool
	stallAgent map[int]bool
	// stallCloudInit are the VMs whose cloud-init never finishes; cloudInitErrors, those whose
	// cloud-init finishes with these errors.
	stallCloudInit  map[int]bool
	cloudInitErrors map[int][]string
	// busyVolumes are the volume IDs a destroy cannot remove (BusyVolume).
	busyVolumes map[string]bool
	// taskLock is the exit status a random lock fault gives the task of the call that runs,
	// empty for none.
	taskLock string
	// chaos counts the random faults by kind.
	chaos [chaosKinds]int
}

func newFaults() faults {
	return faults{
		blocks:          make(map[string]chan struct{}),
		failNext:        make(map[string][]error),
		failTask:        make(map[string][]string),
		stallClone:      make(map[int]bool),
		crashClone:      make(map[int]bool),
		leakClone:       make(map[int]bool),
		stallAgent:      make(map[int]bool),
		stallCloudInit:  make(map[int]bool),
		cloudInitErrors: make(map[int][]string),
		busyVolumes:     make(map[string]bool),
	}
}

// apiMethods are the names a fault can target: pve.API's methods.
var apiMethods = func() map[string]bool {
	t := reflect.TypeFor[pve.API]()
	m := make(map[string]bool, t.NumMethod())
	for i := range t.NumMethod() {
		m[t.Method(i).Name] = true
	}
	return m
}()

// mustMethod panics on a name that is not a pve.API method: a typo would make a fault never
// fire and the test pass for the wrong reason.
func mustMethod(name string) {
	if !apiMethods[name] {
		panic(fmt.Sprintf("pvesim: %q is not a pve.API method", name))
	}
}

func mustTaskType(typ string) {
	if _, ok := defaultTaskDurations[typ]; !ok {
		panic(fmt.Sprintf("pvesim: %q is not a task type the model runs", typ))
	}
}

// FailNext makes the next call of method fail with err, once. Several calls queue up. err is
// returned as given; use ErrDropConnection for a call the REST server should answer by
// closing the connection.
func (c *Cluster) FailNext(method string, err error) {
	mustMethod(method)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.failNext[method] = append(c.faults.failNext[method], err)
}

// FailTask makes the next task of type typ (qmclone, qmstart, ...) that would succeed end with
// exitStatus instead. An error ends it without its effect (a failed clone removes its VM, as
// PVE does); "WARNINGS: N" ends it with its effect, except that a qmdestroy leaves the VM's
// disks behind, as PVE's destroy does when it cannot remove them.
func (c *Cluster) FailTask(typ, exitStatus string) {
	mustTaskType(typ)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.failTask[typ] = append(c.faults.failTask[typ], exitStatus)
}

// StallClone makes a clone to newid run forever: the VM keeps its temporary config and
// "lock: clone", and its flock stays taken.
func (c *Cluster) StallClone(newid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.stallClone[newid] = true
}

// CrashClone makes a clone to newid end as if its host crashed after the clone wrote the full
// config: the task stops with "unexpected status" (its log has no final line), the flock is
// gone, and the config keeps "lock: clone" until someone unlocks it.
func (c *Cluster) CrashClone(newid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.crashClone[newid] = true
}

// Unlock removes VM vmid's lock, as `qm unlock <vmid>` does as root on its node: the
// operator's way to clear a lock a crashed clone left, which the API gives an API token no
// way to (skiplock is root@pam's alone).
func (c *Cluster) Unlock(vmid int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance(c.clock.Now())
	g := c.vms[vmid]
	if g == nil {
		return fmt.Errorf("pvesim: unlock VM %d: no such VM", vmid)
	}
	delete(g.cfg, "lock")
	return nil
}

// LeakClone makes a clone to newid fail once it has allocated its disks, as a clone task
// stopped by a signal does ("clone failed: interrupted by signal"), and fail to free them:
// qemu-server's clone_vm frees each new volume with vdisk_free in an eval and only warns when
// that fails, then unlinks the new VM's config (src/PVE/API2/Qemu.pm). The VM is gone, and its
// disks stay on their storage with no VM, as a storage that could not remove them leaves them.
func (c *Cluster) LeakClone(newid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.leakClone[newid] = true
}

// StallAgent makes the guest agent of vmid never answer.
func (c *Cluster) StallAgent(vmid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.stallAgent[vmid] = true
}

// StallCloudInit makes the cloud-init of vmid never finish: its result.json is never written,
// as with a stage that hangs on a network that does not come up.
func (c *Cluster) StallCloudInit(vmid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.stallCloudInit[vmid] = true
}

// FailCloudInit makes the cloud-init of vmid finish with errs in its result.json, as cloud-init
// lists a failed module: "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1
// attempted commands'))".
func (c *Cluster) FailCloudInit(vmid int, errs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.cloudInitErrors[vmid] = slices.Clone(errs)
}

// Pause pauses a running VM as `qm suspend` does: QEMU stops running guest code, PVE still
// reports it running with qmpstatus "paused", and its guest agent does not answer. A stop ends
// the pause.
func (c *Cluster) Pause(vmid int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance(c.clock.Now())
	g := c.vms[vmid]
	if g == nil || !g.running {
		return fmt.Errorf("pvesim: pause VM %d: no such running VM", vmid)
	}
	g.paused = true
	return nil
}

// Block holds every call of method, after it was recorded in the call log, until release is
// called or the call's context ends (the call then returns ctx.Err()). release may be called
// more than once.
func (c *Cluster) Block(method string) (release func()) {
	mustMethod(method)
	gate := make(chan struct{})
	c.mu.Lock()
	c.faults.blocks[method] = gate
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if c.faults.blocks[method] == gate {
				delete(c.faults.blocks, method)
			}
			c.mu.Unlock()
			close(gate)
		})
	}
}

// Calls returns the call log in call order.
func (c *Cluster) Calls() []Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Call(nil), c.faults.calls...)
}

// CallCount is how many times method was called.
func (c *Cluster) CallCount(method string) int {
	mustMethod(method)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, rec := range c.faults.calls {
		if rec.Method == method {
			n++
		}
	}
	return n
}

// enter starts a call: a cancelled ctx ends it at once, otherwise it is recorded and waits
// while its method is blocked.
func (c *Cluster) enter(ctx context.Context, rec Call) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.faults.calls = append(c.faults.calls, rec)
	gate := c.faults.blocks[rec.Method]
	c.mu.Unlock()
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// injected is the fault a call meets, if any: a queued FailNext first, then the random
// transient failures. The caller holds the lock.
func (c *Cluster) injected(method string) error {
	if q := c.faults.failNext[method]; len(q) > 0 {
		c.faults.failNext[method] = q[1:]
		return q[0]
	}
	if c.transient == 0 && c.drop == 0 {
		return nil
	}
	switch r := c.rng.Float64(); {
	case r < c.drop:
		return ErrDropConnection
	case r < c.drop+c.transient:
		return c.render(serverErr(transientText))
	}
	return nil
}

// taskExit is the exit status of a task of type typ that would end with exit: if the task would
// succeed, the lock error a random fault gave the call starting it, or else the one a FailTask
// queued for the type; otherwise exit. The caller holds the lock.
func (c *Cluster) taskExit(typ, exit string) string {
	if c.faults.taskLock != "" && succeeded(exit) {
		exit, c.faults.taskLock = c.faults.taskLock, ""
		return exit
	}
	q := c.faults.failTask[typ]
	if len(q) == 0 || !succeeded(exit) {
		return exit
	}
	c.faults.failTask[typ] = q[1:]
	return q[0]
}
