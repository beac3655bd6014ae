package upgrade

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The worker deployment and the task queue of a test's workers.
const (
	deployment = "pveflow"
	taskQueue  = "upgrade"
)

// A fleet is one test's stack: the embedded Temporal server and the Proxmox simulator, served in
// the test's process, the worker processes of the builds under test, and the requests the test
// sent, each with the build its operation must run on.
type fleet struct {
	t       *testing.T
	dir     string // the workers' config, logs and slots
	config  string
	cluster *pvesim.Cluster
	server  *testserver.Server
	c       client.Client
	starter *starter.Client

	// workers counts the worker processes started, for their logs' names.
	workers int
	// current is the deployment's current build as the test last made it.
	current string
	// ops are the requests sent, in order.
	ops   []*op
	began time.Time
}

// step logs how far the test has come, for the timeline -v shows.
func (f *fleet) step(what string) {
	f.t.Helper()
	f.t.Logf("%5.1fs %s", time.Since(f.began).Seconds(), what)
}

// op is a request the test sent to a proxy's entity and the operation that served it.
type op struct {
	uid, kind string
	// build is the build the operation must run on, every workflow task of it.
	build string
	req   *starter.Request
}

// The simulator's pace: clones long enough that a create is caught waiting for one, reboots,
// stops and destroys long enough to catch a change or a delete in flight. A change (a reboot)
// ran 2.2 to 2.9 s with reboots of 1.5 s, seconds more than the test takes from seeing it run
// to the switch; 2.5 s leaves room for a loaded machine.
var taskDurations = map[string]time.Duration{
	"qmclone": 3 * time.Second, "qmreboot": 2500 * time.Millisecond, "qmstop": 1500 * time.Millisecond,
	"qmstart": 500 * time.Millisecond, "qmdestroy": 1500 * time.Millisecond,
}

// newFleet starts the server and the simulator; the test starts the workers.
func newFleet(t *testing.T) *fleet {
	t.Helper()
	dir := t.TempDir()
	opts := pvesim.Default()
	opts.TaskDurations = taskDurations
	opts.AgentBootDelay = 300 * time.Millisecond
	cluster := pvesim.New(opts)
	sim, err := simserver.Start(simserver.Options{API: cluster, Dir: filepath.Join(dir, "pvesim")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(config, []byte(workerConfig(sim.URL(), sim.CAFile(), sim.TokenFile())), 0o600))

	began := time.Now()
	server := testserver.New(t)
	return &fleet{t: t, began: began, dir: dir, config: config, cluster: cluster, server: server, c: server.Client(),
		starter: starter.New(server.Client(), taskQueue)}
}

// workerConfig is the workers' configuration: the simulator's default cluster, and budgets and
// polls for a run of seconds. The entity's checks, its close and the observer's listings are an
// hour apart: an entity's workflow tasks in the test are those its requests and operations make.
func workerConfig(url, caFile, tokenFile string) string {
	return fmt.Sprintf(`proxmox:
  url: %s
  caFile: %q
  tokenFile: %q
  nodes: [pve1]
  isoStorage: local
  storage: local-lvm
  templates: {debian13: {vmid: 9000}}
  machineTypes: {small: {cores: 2, memoryMiB: 2048, diskGiB: 10}}
budgets: {clone: 1m, upload: 20s, resize: 20s, start: 20s, stop: 20s, destroy: 20s, running: 20s, agent: 30s, cloudInit: 30s, unlock: 1m, request: 10s}
poll: {initialInterval: 200ms, backoffCoefficient: 1.2, maximumInterval: 1s}
entity: {checkInterval: 1h, closeAfter: 1h}
`, url, caFile, tokenFile)
}

// workerProc is a worker process: the binary of one build.
type workerProc struct {
	build, log string
	cmd        *exec.Cmd
	done       chan struct{}
}

// startWorker starts a worker of the build binary bin, as build ID buildID of the deployment,
// with more flags (--promote). It is stopped with SIGTERM when the test ends, before the server.
func (f *fleet) startWorker(bin, buildID string, flags ...string) {
	f.t.Helper()
	f.workers++
	log := filepath.Join(f.dir, fmt.Sprintf("worker-%d-%s.log", f.workers, buildID))
	out, err := os.Create(log)
	require.NoError(f.t, err)
	defer out.Close()
	args := append([]string{"--config", f.config, "--task-queue", taskQueue, "--health-every", "0",
		"--deployment-name", deployment, "--build-id", buildID}, flags...)
	cmd := exec.Command(bin, args...)
	// Only what the worker needs: none of the test's PVEFLOW_* or OTEL_* settings.
	cmd.Env = []string{"TEMPORAL_ADDRESS=" + f.server.Address(), "TEMPORAL_NAMESPACE=" + f.server.Namespace(),
		"HOME=" + f.dir, "XDG_RUNTIME_DIR=" + f.dir}
	cmd.Stdout, cmd.Stderr = out, out
	// Killed by the kernel if the test binary dies, so that a test killed by its timeout leaves
	// no worker behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(f.t, cmd.Start(), "start the worker of build %s", buildID)
	w := &workerProc{build: buildID, log: log, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	f.t.Cleanup(func() {
		w.stop()
		if f.t.Failed() {
			f.t.Logf("the log of the worker of build %s ends:\n%s", w.build, tail(w.log))
		}
	})
}

// stop ends the worker with SIGTERM, as a rollout does, or kills it when it has not stopped
// within 30 s.
func (w *workerProc) stop() {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// tail is the end of a log, for a failure's message.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	const keep = 6 << 10
	if len(data) > keep {
		data = data[len(data)-keep:]
	}
	return string(data)
}

// waitCurrent waits for build to be the deployment's current version: a worker started with
// --promote makes it so once it polls.
func (f *fleet) waitCurrent(build string) {
	f.t.Helper()
	handle := f.c.WorkerDeploymentClient().GetHandle(deployment)
	f.eventually("build "+build+" is the deployment's current version", func() bool {
		desc, err := handle.Describe(context.Background(), client.WorkerDeploymentDescribeOptions{})
		return err == nil && desc.Info.RoutingConfig.CurrentVersion != nil && desc.Info.RoutingConfig.CurrentVersion.BuildID == build
	})
	f.waitRouted()
	f.current = build
}

// waitPolling waits until the server knows build's version: its workers poll, and it can be
// made current at once.
func (f *fleet) waitPolling(build string) {
	f.t.Helper()
	handle := f.c.WorkerDeploymentClient().GetHandle(deployment)
	f.eventually("the workers of build "+build+" poll", func() bool {
		desc, err := handle.DescribeVersion(context.Background(), client.WorkerDeploymentDescribeVersionOptions{BuildID: build})
		return err == nil && len(desc.Info.TaskQueuesInfos) > 0
	})
}

// promote makes build the deployment's current version, as `temporal worker deployment
// set-current-version` does, and returns when.
func (f *fleet) promote(build string) time.Time {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(f.t, starter.PromoteBuild(ctx, f.c, deployment, build))
	at := time.Now()
	f.waitRouted()
	f.current = build
	return at
}

// waitRouted waits until the deployment's routing has reached every task queue of it. Until
// then a task queue may still send a workflow task to the build that was current before: the
// server answers set-current-version once it has recorded the switch, and tells the task queues
// after, which `temporal worker deployment describe` shows as its routing config update state.
func (f *fleet) waitRouted() {
	f.t.Helper()
	f.eventually("the deployment's routing reaches its task queues", func() bool {
		resp, err := f.c.WorkflowService().DescribeWorkerDeployment(context.Background(),
			&workflowservice.DescribeWorkerDeploymentRequest{Namespace: f.server.Namespace(), DeploymentName: deployment})
		return err == nil && resp.GetWorkerDeploymentInfo().GetRoutingConfigUpdateState() == enumspb.ROUTING_CONFIG_UPDATE_STATE_COMPLETED
	})
}

// pin pins uid's entity to build, as `temporal workflow update-options
// --versioning-override-behavior pinned` does: its workflow tasks go to that build whichever is
// current.
func (f *fleet) pin(uid, build string) {
	f.t.Helper()
	_, err := f.c.UpdateWorkflowExecutionOptions(context.Background(), client.UpdateWorkflowExecutionOptionsRequest{
		WorkflowId: core.ProxyWorkflowID(uid),
		WorkflowExecutionOptionsChanges: client.WorkflowExecutionOptionsChanges{
			VersioningOverride: &client.VersioningOverrideChange{Value: &client.PinnedVersioningOverride{
				Version: worker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: build},
			}},
		},
	})
	require.NoError(f.t, err, "pin the entity of %s to build %s", uid, build)
}

// uidOf is the UID of the proxy of a role in the test's fleet.
func uidOf(role string) string { return "upgrade-" + role }

func createInput(uid string) proxyvm.ProxySpec {
	return proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small", UserData: "#cloud-config\nhostname: " + uid + "\n"}
}

// create, change and remove send a request to the entity of the role's proxy, as the pveflow
// CLI does, and return once the entity accepted it. The operation that serves it must run on
// the current build.
func (f *fleet) create(role string) *op {
	return f.send(uidOf(role), proxyvm.OpCreate, f.current, func(ctx context.Context, uid string) (*starter.Request, error) {
		return f.starter.Create(ctx, createInput(uid))
	})
}

func (f *fleet) change(role string) *op {
	return f.send(uidOf(role), proxyvm.OpChange, f.current, f.changeRequest)
}

func (f *fleet) remove(role string) *op {
	return f.send(uidOf(role), proxyvm.OpDelete, f.current, f.deleteRequest)
}

// changeRequest sends a change of the proxy's user-data: a new seed and a reboot.
func (f *fleet) changeRequest(ctx context.Context, uid string) (*starter.Request, error) {
	ud := fmt.Sprintf("#cloud-config\nhostname: %s\n# change %d\n", uid, len(f.opsOf(uid)))
	return f.starter.Change(ctx, proxyvm.ChangeRequest{UID: uid, UserData: &ud})
}

func (f *fleet) deleteRequest(ctx context.Context, uid string) (*starter.Request, error) {
	return f.starter.Delete(ctx, proxyvm.DeleteProxyInput{UID: uid})
}

// send sends uid's entity a request of kind with request, and records it with the build its
// operation must run on.
func (f *fleet) send(uid, kind, build string, request func(context.Context, string) (*starter.Request, error)) *op {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := request(ctx, uid)
	require.NoError(f.t, err, "%s of %s", kind, uid)
	o := &op{uid: uid, kind: kind, build: build, req: req}
	f.ops = append(f.ops, o)
	return o
}

// opsOf are the requests sent to uid, in order.
func (f *fleet) opsOf(uid string) []*op {
	var out []*op
	for _, o := range f.ops {
		if o.uid == uid {
			out = append(out, o)
		}
	}
	return out
}

// serve waits for the operations serving ops to close, and requires that each succeeded.
func (f *fleet) serve(ops ...*op) {
	f.t.Helper()
	for _, o := range ops {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := o.req.Get(ctx, nil)
		cancel()
		require.NoError(f.t, err, "%s of %s", o.kind, o.uid)
	}
}

// waitRunning waits until the entity of each op runs the operation that serves it: a
// request in flight.
func (f *fleet) waitRunning(ops ...*op) {
	f.t.Helper()
	for _, o := range ops {
		f.eventually(fmt.Sprintf("the %s of %s runs", o.kind, o.uid), func() bool {
			st, err := f.status(o.uid)
			return err == nil && st.Operation != nil && st.Operation.Kind == o.kind && st.Operation.RunID != ""
		})
	}
}

// status is what the entity of uid answers to its status query.
func (f *fleet) status(uid string) (proxyvm.ProxyStatus, error) {
	var st proxyvm.ProxyStatus
	val, err := f.c.QueryWorkflow(context.Background(), core.ProxyWorkflowID(uid), "", core.StatusQuery)
	if err != nil {
		return st, err
	}
	return st, val.Get(&st)
}

// describe is the versioning of the run: its behavior, the build it is on, and its override.
func (f *fleet) describe(workflowID, runID string) versioning {
	f.t.Helper()
	desc, err := f.c.DescribeWorkflowExecution(context.Background(), workflowID, runID)
	require.NoError(f.t, err, "describe %s", workflowID)
	info := desc.GetWorkflowExecutionInfo()
	v := info.GetVersioningInfo()
	out := versioning{behavior: v.GetBehavior(), build: v.GetDeploymentVersion().GetBuildId(),
		pinnedTo: v.GetVersioningOverride().GetPinned().GetVersion().GetBuildId(),
		started:  info.GetStartTime().AsTime()}
	if info.GetCloseTime() != nil {
		out.closed = info.GetCloseTime().AsTime()
	}
	return out
}

type versioning struct {
	behavior        enumspb.VersioningBehavior
	build, pinnedTo string
	started, closed time.Time
}

// eventually polls cond every 100 ms for up to a minute.
func (f *fleet) eventually(what string, cond func() bool) {
	f.t.Helper()
	require.Eventually(f.t, cond, time.Minute, 100*time.Millisecond, what)
}
