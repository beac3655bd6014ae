package chaos

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
)

// crashAPI is the simulator's model as the crash test's worker reaches it (through simserver),
// with hooks on chosen calls: once armed, the nth call of a method runs, takes its effect, and
// then, before its answer goes back, its hook runs (holds the answer, or kills the worker); the
// answer is sent after the hook returns. Calls before the arming pass through untouched.
type crashAPI struct {
	pve.API

	mu    sync.Mutex
	calls map[string]int // calls of each method since the arming
	hooks []callHook     // those still to run
}

// callHook runs fn after the nth call of method.
type callHook struct {
	method string
	nth    int
	fn     func()
}

// arm replaces the hooks with hooks, counting calls from now on.
func (a *crashAPI) arm(hooks ...callHook) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls, a.hooks = map[string]int{}, hooks
}

// pending is how many hooks have not run.
func (a *crashAPI) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.hooks)
}

// after counts a call of method that has run, and runs its hook if it has one.
func (a *crashAPI) after(method string) {
	a.mu.Lock()
	if len(a.hooks) == 0 {
		a.mu.Unlock()
		return
	}
	a.calls[method]++
	var run []func()
	a.hooks = slices.DeleteFunc(a.hooks, func(h callHook) bool {
		if h.method == method && h.nth == a.calls[method] {
			run = append(run, h.fn)
			return true
		}
		return false
	})
	a.mu.Unlock()
	for _, fn := range run {
		fn()
	}
}

func (a *crashAPI) Version(ctx context.Context) (pve.Version, error) {
	v, err := a.API.Version(ctx)
	a.after("Version")
	return v, err
}

func (a *crashAPI) NodeStatus(ctx context.Context, node string) (pve.NodeStatus, error) {
	v, err := a.API.NodeStatus(ctx, node)
	a.after("NodeStatus")
	return v, err
}

func (a *crashAPI) StorageStatus(ctx context.Context, node, storage string) (pve.StorageStatus, error) {
	v, err := a.API.StorageStatus(ctx, node, storage)
	a.after("StorageStatus")
	return v, err
}

func (a *crashAPI) ClusterResources(ctx context.Context) ([]pve.VMResource, error) {
	v, err := a.API.ClusterResources(ctx)
	a.after("ClusterResources")
	return v, err
}

func (a *crashAPI) VMConfig(ctx context.Context, node string, vmid int) (pve.VMConfig, error) {
	v, err := a.API.VMConfig(ctx, node, vmid)
	a.after("VMConfig")
	return v, err
}

func (a *crashAPI) SetVMConfig(ctx context.Context, node string, vmid int, params pve.VMConfig) error {
	err := a.API.SetVMConfig(ctx, node, vmid, params)
	a.after("SetVMConfig")
	return err
}

func (a *crashAPI) Clone(ctx context.Context, node string, vmid int, params pve.CloneParams) (pve.UPID, error) {
	v, err := a.API.Clone(ctx, node, vmid, params)
	a.after("Clone")
	return v, err
}

func (a *crashAPI) Resize(ctx context.Context, node string, vmid int, disk, size string) (pve.UPID, error) {
	v, err := a.API.Resize(ctx, node, vmid, disk, size)
	a.after("Resize")
	return v, err
}

func (a *crashAPI) Start(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	v, err := a.API.Start(ctx, node, vmid)
	a.after("Start")
	return v, err
}

func (a *crashAPI) Stop(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	v, err := a.API.Stop(ctx, node, vmid)
	a.after("Stop")
	return v, err
}

func (a *crashAPI) Reboot(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	v, err := a.API.Reboot(ctx, node, vmid)
	a.after("Reboot")
	return v, err
}

func (a *crashAPI) VMStatus(ctx context.Context, node string, vmid int) (pve.VMStatus, error) {
	v, err := a.API.VMStatus(ctx, node, vmid)
	a.after("VMStatus")
	return v, err
}

func (a *crashAPI) Destroy(ctx context.Context, node string, vmid int) (pve.UPID, error) {
	v, err := a.API.Destroy(ctx, node, vmid)
	a.after("Destroy")
	return v, err
}

func (a *crashAPI) TaskStatus(ctx context.Context, node string, upid pve.UPID) (pve.TaskStatus, error) {
	v, err := a.API.TaskStatus(ctx, node, upid)
	a.after("TaskStatus")
	return v, err
}

func (a *crashAPI) AgentNetworkInterfaces(ctx context.Context, node string, vmid int) ([]pve.AgentInterface, error) {
	v, err := a.API.AgentNetworkInterfaces(ctx, node, vmid)
	a.after("AgentNetworkInterfaces")
	return v, err
}

func (a *crashAPI) SDNVnets(ctx context.Context) ([]pve.SDNVnet, error) {
	v, err := a.API.SDNVnets(ctx)
	a.after("SDNVnets")
	return v, err
}

func (a *crashAPI) NodeTasks(ctx context.Context, node string, p pve.TaskListParams) ([]pve.TaskListEntry, error) {
	v, err := a.API.NodeTasks(ctx, node, p)
	a.after("NodeTasks")
	return v, err
}

func (a *crashAPI) AgentFileRead(ctx context.Context, node string, vmid int, file string) (string, error) {
	v, err := a.API.AgentFileRead(ctx, node, vmid, file)
	a.after("AgentFileRead")
	return v, err
}

func (a *crashAPI) UploadISO(ctx context.Context, node, storage, filename string, r io.Reader, size int64) (pve.UPID, error) {
	v, err := a.API.UploadISO(ctx, node, storage, filename, r, size)
	a.after("UploadISO")
	return v, err
}

func (a *crashAPI) DeleteVolume(ctx context.Context, node, storage, volid string) (pve.UPID, error) {
	v, err := a.API.DeleteVolume(ctx, node, storage, volid)
	a.after("DeleteVolume")
	return v, err
}

func (a *crashAPI) StorageContent(ctx context.Context, node, storage, content string) ([]pve.StorageVolume, error) {
	v, err := a.API.StorageContent(ctx, node, storage, content)
	a.after("StorageContent")
	return v, err
}

func (a *crashAPI) TaskLog(ctx context.Context, node string, upid pve.UPID) ([]pve.TaskLogLine, error) {
	v, err := a.API.TaskLog(ctx, node, upid)
	a.after("TaskLog")
	return v, err
}

func (a *crashAPI) Permissions(ctx context.Context, path string) (pve.Privileges, error) {
	v, err := a.API.Permissions(ctx, path)
	a.after("Permissions")
	return v, err
}

func (a *crashAPI) Migrate(ctx context.Context, node string, vmid int, p pve.MigrateParams) (pve.UPID, error) {
	v, err := a.API.Migrate(ctx, node, vmid, p)
	a.after("Migrate")
	return v, err
}

func (a *crashAPI) HAManagerStatus(ctx context.Context) (pve.HAManagerStatus, error) {
	v, err := a.API.HAManagerStatus(ctx)
	a.after("HAManagerStatus")
	return v, err
}

func (a *crashAPI) AddHAResource(ctx context.Context, p pve.HAResourceParams) error {
	err := a.API.AddHAResource(ctx, p)
	a.after("AddHAResource")
	return err
}

func (a *crashAPI) DeleteHAResource(ctx context.Context, sid string) error {
	err := a.API.DeleteHAResource(ctx, sid)
	a.after("DeleteHAResource")
	return err
}

// TestCrashAPI_hooksEveryMethodOfTheSeam: a method crashAPI does not declare itself passes
// through the embedded API uncounted, so a crash point after one of its calls is never reached
// (SDNVnets once was).
func TestCrashAPI_hooksEveryMethodOfTheSeam(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "crashapi_test.go", nil, 0)
	require.NoError(t, err)
	declared := map[string]bool{}
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil {
			declared[fn.Name.Name] = true
		}
	}
	seam := reflect.TypeFor[pve.API]()
	for i := range seam.NumMethod() {
		name := seam.Method(i).Name
		assert.True(t, declared[name], "crashAPI does not hook %s", name)
	}
}
