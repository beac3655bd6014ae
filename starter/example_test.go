package starter_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// The examples run against the Temporal server, worker and simulated cluster TestMain starts
// (examplestack_test.go) and names in TEMPORAL_ADDRESS: their output is what the calls return.
// Each has a UID of its own, as they share that stack.

// A proxy's life, as an operator's program drives it: dial Temporal as the environment says,
// ask for the proxy of a UID, wait for its VM, change its machine type, read its status and
// delete it. Each call returns once the proxy's entity accepted the request; Get waits for the
// operation that serves it.
func Example() {
	ctx := context.Background()
	c, err := starter.DialFromEnv(ctx) // TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, PVEFLOW_CODEC_KEY_FILE, ...
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	proxies := starter.New(c, core.DefaultTaskQueue)
	const uid = "0f5b1c9e"

	req, err := proxies.Create(ctx, proxyvm.ProxySpec{
		UID: uid, Image: "debian13", MachineType: "small", UserData: "#cloud-config\npackages: [squid]\n",
	})
	if err != nil {
		log.Fatal(err)
	}
	var created proxyvm.CreateProxyResult
	if err := req.Get(ctx, &created); err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", created.ProviderID, "on", created.Node, "at", created.IPv4)

	req, err = proxies.Change(ctx, proxyvm.ChangeRequest{UID: uid, MachineType: "large"})
	if err != nil {
		log.Fatal(err)
	}
	var changed proxyvm.ChangeProxyResult
	if err := req.Get(ctx, &changed); err != nil {
		log.Fatal(err)
	}
	fmt.Println("changed:", strings.Join(changed.Changed, ", "))

	st, err := proxies.ProxyStatus(ctx, uid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", st.Phase, st.Desired.MachineType, st.Observed.State)

	req, err = proxies.Delete(ctx, proxyvm.DeleteProxyInput{UID: uid})
	if err != nil {
		log.Fatal(err)
	}
	var deleted proxyvm.DeleteProxyResult
	if err := req.Get(ctx, &deleted); err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", deleted.Destroyed)
	// Output:
	// created: vms/145170/proxy-3yivsuafru2mmrzt on pve1 at 10.2.68.172
	// changed: cores 2 -> 4, memory 2048 -> 4096 MiB, disk scsi0 10G -> 20G
	// status: present large Running
	// deleted: [VM 145170 on node pve1]
}

// Create under an Update ID, which makes a request sent again after its answer was lost the
// same request rather than a second one.
func ExampleClient_Create() {
	ctx := context.Background()
	c, err := starter.DialFromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	proxies := starter.New(c, core.DefaultTaskQueue)

	req, err := proxies.Create(ctx, proxyvm.ProxySpec{
		UID: "7d3e2a10", Image: "debian13", MachineType: "small", UserData: "#cloud-config\n",
	}, starter.WithUpdateID("7d3e2a10-create-1"))
	if err != nil {
		log.Fatal(err)
	}
	var res proxyvm.CreateProxyResult
	err = req.Get(ctx, &res)
	if starter.FailureType(err) == core.FailTransient {
		log.Fatal("ask again later: ", err) // a budget ran out, or Proxmox had trouble
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.ProviderID, res.Node, res.IPv4)
	// Output: vms/131934/proxy-44iatlcjuws3lgx4 pve1 10.2.15.186
}

// A request the proxy's entity refuses fails at once, with nothing run or recorded.
func ExampleClient_Create_rejected() {
	ctx := context.Background()
	c, err := starter.DialFromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	proxies := starter.New(c, core.DefaultTaskQueue)

	_, err = proxies.Create(ctx, proxyvm.ProxySpec{UID: "4b9e0c7a", Image: "debian13", MachineType: "huge"})
	if errors.Is(err, starter.ErrRejected) {
		fmt.Println(err)
	}
	// Output: create of proxy 4b9e0c7a refused: machineType: "huge" is not a configured machine type (choices: large, small)
}

// A change of the user-data gives the proxy a new seed ISO and cloud-init instance-id, and
// reboots the guest, so cloud-init runs the new user-data.
func ExampleClient_Change() {
	ctx := context.Background()
	c, err := starter.DialFromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	proxies := starter.New(c, core.DefaultTaskQueue)
	const uid = "c41a7f02"
	req, err := proxies.Create(ctx, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small"})
	if err != nil {
		log.Fatal(err)
	}
	if err := req.Get(ctx, nil); err != nil {
		log.Fatal(err)
	}

	userData := "#cloud-config\npackages: [squid, curl]\n"
	req, err = proxies.Change(ctx, proxyvm.ChangeRequest{UID: uid, UserData: &userData})
	if err != nil {
		log.Fatal(err)
	}
	var res proxyvm.ChangeProxyResult
	if err := req.Get(ctx, &res); err != nil {
		log.Fatal(err)
	}
	fmt.Println("changed:", strings.Join(res.Changed, ", "))
	fmt.Println("restarted:", res.Restarted)
	// Output:
	// changed: user-data (instance-id c41a7f02.g1)
	// restarted: true
}

// The status of a proxy: what was asked, what its last operation or check found, and its
// latest operations.
func ExampleClient_ProxyStatus() {
	ctx := context.Background()
	c, err := starter.DialFromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	proxies := starter.New(c, core.DefaultTaskQueue)
	const uid = "9a62d5e8"
	req, err := proxies.Create(ctx, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small"})
	if err != nil {
		log.Fatal(err)
	}
	if err := req.Get(ctx, nil); err != nil {
		log.Fatal(err)
	}

	st, err := proxies.ProxyStatus(ctx, uid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("phase:", st.Phase)
	fmt.Println("desired:", st.Desired.Image, st.Desired.MachineType)
	fmt.Println("observed:", st.Observed.VMID, st.Observed.Node, st.Observed.State, st.Observed.IPv4)
	for _, op := range st.Operations {
		fmt.Println("operation:", op.Kind, op.Reason, op.Outcome)
	}
	// Output:
	// phase: present
	// desired: debian13 small
	// observed: 124045 pve1 Running 10.1.240.47
	// operation: create requested completed
}

// A delete finds the proxy's VM by the UID alone, and removes it and its seed ISO.
func ExampleClient_Delete() {
	ctx := context.Background()
	c, err := starter.DialFromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	proxies := starter.New(c, core.DefaultTaskQueue)
	const uid = "e5f08b33"
	req, err := proxies.Create(ctx, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small"})
	if err != nil {
		log.Fatal(err)
	}
	if err := req.Get(ctx, nil); err != nil {
		log.Fatal(err)
	}

	req, err = proxies.Delete(ctx, proxyvm.DeleteProxyInput{UID: uid})
	if err != nil {
		log.Fatal(err)
	}
	var res proxyvm.DeleteProxyResult
	if err := req.Get(ctx, &res); err != nil {
		log.Fatal(err)
	}
	for _, vm := range res.Destroyed {
		fmt.Println("destroyed:", vm)
	}
	// Output: destroyed: VM 183857 on node pve1
}

// A program that asked for a proxy and restarted since, a controller say, waits for the
// create by the UID alone.
func ExampleClient_CreateResult() {
	ctx := context.Background()
	c, err := starter.DialFromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	proxies := starter.New(c, core.DefaultTaskQueue)
	const uid = "21d7c9b4"
	if _, err := proxies.Create(ctx, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small"}); err != nil {
		log.Fatal(err)
	}

	res, err := proxies.CreateResult(ctx, uid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.ProviderID, res.Node, res.IPv4)
	// Output: vms/174479/proxy-c4a3bnh7rkcpw37q pve1 10.2.185.231
}

// A later request of a proxy supersedes one its entity has yet to serve: a delete stops the
// create before it, whose Get fails with FailSuperseded.
func ExampleFailureType() {
	ctx := context.Background()
	c, err := starter.DialFromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	proxies := starter.New(c, core.DefaultTaskQueue)
	const uid = "b80e4d16"
	create, err := proxies.Create(ctx, proxyvm.ProxySpec{UID: uid, Image: "debian13", MachineType: "small"})
	if err != nil {
		log.Fatal(err)
	}
	del, err := proxies.Delete(ctx, proxyvm.DeleteProxyInput{UID: uid})
	if err != nil {
		log.Fatal(err)
	}

	err = create.Get(ctx, nil)
	fmt.Println("create:", starter.FailureType(err)) // starter.FailSuperseded
	if err := del.Get(ctx, nil); err != nil {
		log.Fatal(err)
	}
	st, err := proxies.ProxyStatus(ctx, uid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("phase:", st.Phase)
	// Output:
	// create: Superseded
	// phase: absent
}
