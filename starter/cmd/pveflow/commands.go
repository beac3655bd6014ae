package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/core"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

func (c *cli) createCommand() *cobra.Command {
	var in proxyvm.ProxySpec
	var userDataFile string
	var nics []string
	var wait bool
	cmd := &cobra.Command{
		Use:   "create --uid UID [flags]",
		Short: "Ask for the proxy of a UID to be created, and with --wait wait for its VM",
		Long: `Asks the proxy of UID (its entity, workflow proxy/<UID>, started by the first request) to be
present with the image, machine type, zone and user-data given, and returns once it has
accepted the request; a request it refuses, such as an unknown image, fails at once. With
--wait, waits for the CreateProxy that serves it and prints the VM: provider ID, node, IPv4 and
IPv6.

Without address flags net0 takes its IPv4 from DHCP. --ipv4 and --ipv6 give it static
addresses instead (each ADDRESS/PREFIX-LENGTH, each with an optional gateway inside its prefix;
an IPv6 gateway may be link-local), written into the seed's cloud-init network-config; --ipv6
alone keeps DHCP's IPv4 beside it, and --no-ipv4 makes the proxy IPv6-only. The create waits
until the guest reports each address. Addresses are fixed for the proxy's life: to change them,
delete the proxy and create it again.

--nic, repeated, gives the VM's NICs in place of its machine type's: the first is net0, the
template's NIC (an empty BRIDGE keeps its bridge), each further one a new NIC on BRIDGE; VLAN is
the NIC's VLAN tag, 1 to 4094.

The user-data file holds at most 65536 bytes (64 KiB); it is sent to the workflow and never
printed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, in.UID); err != nil {
				return err
			}
			var err error
			if in.NICs, err = parseNICs(nics); err != nil {
				return usageError{fmt.Errorf("create: --nic: %w", err)}
			}
			if userDataFile != "" {
				if in.UserData, err = readUserData(cmd, userDataFile); err != nil {
					return err
				}
			}
			// The spec's one validation, as the starter and the proxy's entity ask it.
			if err := in.Check(); err != nil {
				return usageError{err}
			}
			return sendAndWait(cmd.Context(), c, starter.Create, in.UID, wait,
				func(ctx context.Context) (*starter.Request, error) { return c.starter.Create(ctx, in) },
				c.printCreated)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.UID, "uid", "", "the proxy's `UID` (required)")
	f.StringVar(&in.Name, "name", "", "the VM's `NAME`, also the guest's hostname: a DNS label of 1 to 63 letters, digits and '-', not starting or ending with '-'; the default is derived from the UID")
	f.StringVar(&in.Zone, "zone", "", "the `NODE` to place the VM on; the default is the node with the most free memory")
	f.StringVar(&in.Image, "image", "", "the `IMAGE`: a template of the configuration")
	f.StringVar(&in.MachineType, "machine-type", "", "the machine `TYPE` of the configuration: cores, memory, disk")
	f.StringVar(&in.Region, "region", "", "the `REGION`, kept in the VM's mark")
	f.StringVar(&in.AddressPool, "address-pool", "", "the address `POOL` of the configuration (proxmox.addressPools) net0's static addresses are allocated from; the default is DHCP")
	f.StringVar(&userDataFile, "user-data-file", "", "cloud-init user-data `FILE` of at most 64 KiB, for the VM's seed ISO")
	f.StringVar(&in.Addresses.IPv4, "ipv4", "", "net0's static IPv4 `ADDRESS/LEN`, such as 192.0.2.10/24; the default is DHCP")
	f.StringVar(&in.Addresses.Gateway4, "gateway4", "", "the IPv4 default `GATEWAY`, inside --ipv4's prefix")
	f.StringVar(&in.Addresses.IPv6, "ipv6", "", "net0's static IPv6 `ADDRESS/LEN`, such as 2001:db8::10/64; the default is none")
	f.StringVar(&in.Addresses.Gateway6, "gateway6", "", "the IPv6 default `GATEWAY`, inside --ipv6's prefix or link-local")
	f.BoolVar(&in.Addresses.NoIPv4, "no-ipv4", false, "no IPv4 at all, not even DHCP's: an IPv6-only proxy (needs --ipv6)")
	f.StringArrayVar(&nics, "nic", nil, "a NIC, `BRIDGE[:VLAN]`, repeated: net0 first, then the NICs to add; the default is the machine type's")
	f.BoolVar(&wait, "wait", false, "wait for the VM and print it")
	return cmd
}

// parseNICs reads --nic values, "BRIDGE[:VLAN]" each; the spec's check (ProxySpec.Check) judges
// them.
func parseNICs(values []string) ([]config.NIC, error) {
	var nics []config.NIC
	for _, v := range values {
		bridge, vlan, tagged := strings.Cut(v, ":")
		n := config.NIC{Bridge: bridge}
		if tagged {
			var err error
			if n.VLAN, err = strconv.Atoi(vlan); err != nil {
				return nil, fmt.Errorf("%q: VLAN %q is not a number", v, vlan)
			}
		}
		nics = append(nics, n)
	}
	return nics, nil
}

// readUserData reads the user-data file of cmd's --user-data-file: a file that cannot be read
// is a usage error; its size the spec's or the change's check judges. The file may hold
// secrets: an error names the file, never its content.
func readUserData(cmd *cobra.Command, file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", usageError{fmt.Errorf("%s: --user-data-file: %w", cmd.Name(), err)}
	}
	return string(data), nil
}

func (c *cli) updateCommand() *cobra.Command {
	var req proxyvm.ChangeRequest
	var userDataFile string
	cmd := &cobra.Command{
		Use:   "update --uid UID [--machine-type TYPE] [--user-data-file FILE] [--image IMAGE] [flags]",
		Short: "Change a present proxy: its machine type, user-data or image; print what changed",
		Long: `Asks the proxy of UID to change what the flags give, at least one of them, waits for the
operation that serves the request and prints what changed and whether the guest was restarted.
A request the proxy refuses, such as an unknown machine type or a change of a proxy that is not
present, fails at once.

A new machine type writes cores and memory to the VM's config and grows its disk, and restarts
the guest when it must; new user-data becomes a new seed ISO with a new cloud-init instance-id
and a reboot, so that cloud-init runs it; a new image rebuilds the VM from the new template
(a delete and a create).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, req.UID); err != nil {
				return err
			}
			if userDataFile != "" {
				data, err := readUserData(cmd, userDataFile)
				if err != nil {
					return err
				}
				req.UserData = &data
			}
			if err := req.Check(); err != nil {
				return usageError{err}
			}
			return sendAndWait(cmd.Context(), c, starter.Change, req.UID, true,
				func(ctx context.Context) (*starter.Request, error) { return c.starter.Change(ctx, req) },
				c.printChanged)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.UID, "uid", "", "the proxy's `UID` (required)")
	f.StringVar(&req.MachineType, "machine-type", "", "the new machine `TYPE`: cores, memory, disk")
	f.StringVar(&userDataFile, "user-data-file", "", "the new cloud-init user-data `FILE` of at most 64 KiB")
	f.StringVar(&req.Image, "image", "", "the new `IMAGE`: the VM is rebuilt from its template")
	return cmd
}

func (c *cli) deleteCommand() *cobra.Command {
	var in proxyvm.DeleteProxyInput
	var wait bool
	cmd := &cobra.Command{
		Use:   "delete --uid UID [flags]",
		Short: "Ask for the proxy of a UID to be deleted; a create that still runs is superseded",
		Long: `Asks the proxy of UID to be absent: a create of it that still runs is stopped, and a DeleteProxy
destroys its VM and removes its seed ISO. Returns once the proxy has accepted the request. The
UID alone finds the proxy's VM and its seed ISO. With --wait, waits for the delete and prints
what it destroyed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, in.UID); err != nil {
				return err
			}
			return sendAndWait(cmd.Context(), c, starter.Delete, in.UID, wait,
				func(ctx context.Context) (*starter.Request, error) { return c.starter.Delete(ctx, in) },
				func(res proxyvm.DeleteProxyResult) error { return c.printDeleted(in.UID, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.UID, "uid", "", "the proxy's `UID` (required)")
	f.BoolVar(&wait, "wait", false, "wait for the delete and print what it destroyed")
	return cmd
}

// sendAndWait connects and sends the request of op for uid with send, saying so when no worker
// takes it; then it prints the accepted request or, with wait, waits for its result with a
// progress line and prints it with show.
func sendAndWait[T any](ctx context.Context, c *cli, op starter.Op, uid string, wait bool,
	send func(context.Context) (*starter.Request, error),
	show func(T) error,
) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	var req *starter.Request
	res, err := awaitRequest(ctx, c, op, uid, func(ctx context.Context) (T, error) {
		if wait {
			return sendAndGet[T](ctx, op, uid, send)
		}
		var res T
		r, err := send(ctx)
		req = r
		return res, err
	})
	switch {
	case err != nil:
		return err
	case !wait:
		return c.printAccepted(req)
	}
	return show(res)
}

// sendAndGet sends a request of op for uid with send and waits for its result. The failure of
// the operation that serves it is a failed; a refusal, or any error of send, is as send said.
func sendAndGet[T any](ctx context.Context, op starter.Op, uid string, send func(context.Context) (*starter.Request, error)) (T, error) {
	var res T
	req, err := send(ctx)
	if err != nil {
		return res, err
	}
	if err := req.Get(ctx, &res); err != nil {
		return res, failed{op: op, uid: uid, err: err}
	}
	return res, nil
}

// awaitRequest runs call, which sends a request of op for uid and may wait for its result,
// showing the progress of the operation the proxy runs on stderr about once a second, and
// saying so when no live worker polls its task queue.
func awaitRequest[T any](ctx context.Context, c *cli, op starter.Op, uid string, call func(context.Context) (T, error)) (T, error) {
	line := &progressLine{w: c.stderr, width: c.terminalWidth()}
	defer line.clear()
	res, err := await(ctx, c, fmt.Sprintf("the %s of proxy %s", op, uid), line, call, watchProxy(c, uid, line))
	if ctx.Err() != nil {
		return res, fmt.Errorf("stopped waiting; the %s of proxy %s goes on: follow it with 'pveflow status --uid %s'", op, uid, uid)
	}
	return res, err
}

// watchProxy is await's watch of the proxy of uid: it shows the progress of the operation the
// proxy runs on line, and returns the workers of its entity, which name a task of the entity
// or of its operation that no worker takes.
func watchProxy(c *cli, uid string, line *progressLine) func(context.Context) (starter.Workers, error) {
	return func(ctx context.Context) (starter.Workers, error) {
		p, err := c.starter.ProxyProgress(ctx, uid)
		if err != nil {
			// The request has not started the proxy's entity yet.
			return c.starter.Workers(ctx)
		}
		if p.OperationProgress != nil {
			line.show(*p.OperationProgress, time.Now())
		}
		return p.Workers, nil
	}
}

func (c *cli) statusCommand() *cobra.Command {
	var uid string
	cmd := &cobra.Command{
		Use:   "status --uid UID",
		Short: "The proxy of a UID: what was asked, what is, the operation that runs and its wait",
		Long: `Shows the proxy of UID as its entity (workflow proxy/<UID>) answers its status query: its phase,
the spec last asked for, the VM as last seen (and any drift from the spec), the operation that
runs with its step and the wait it is in, the requests it has yet to answer, the last failure and
the latest operations. When no worker answers the query, it shows what Temporal keeps (the
entity's search attributes), with when a worker last polled its task queue.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, uid); err != nil {
				return err
			}
			return c.status(cmd.Context(), uid)
		},
	}
	cmd.Flags().StringVar(&uid, "uid", "", "the proxy's `UID` (required)")
	return cmd
}

func (c *cli) status(ctx context.Context, uid string) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	p, err := c.starter.ProxyProgress(ctx, uid)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(p)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "proxy\t%s\n", p.UID)
	fmt.Fprintf(tw, "phase\t%s\n", cmp.Or(p.Phase, "- (no worker has run the entity yet)"))
	fmt.Fprintf(tw, "entity\t%s, workflow %s\n", p.State, core.ProxyWorkflowID(uid))
	switch {
	case p.Source == starter.SourceQuery:
		fmt.Fprintf(tw, "desired\t%s\n", desiredText(p.Desired))
	case p.Desired.Name != "":
		// Described, the spec is unknown but for the name of the search attributes.
		fmt.Fprintf(tw, "name\t%s\n", p.Desired.Name)
	}
	if o := observedText(p.Observed); o != "" {
		fmt.Fprintf(tw, "observed\t%s\n", o)
	}
	for _, d := range p.Observed.Drift {
		fmt.Fprintf(tw, "drift\t%s\n", d)
	}
	if op := p.Operation; op != nil {
		fmt.Fprintf(tw, "operation\t%s, workflow %s, since %s\n", kindText(*op), op.WorkflowID, op.StartedAt.Local().Format(time.DateTime))
		if child := p.OperationProgress; child != nil {
			operationLines(tw, *child)
		}
	}
	for _, r := range p.Requests {
		fmt.Fprintf(tw, "request\t%s\n", requestText(r, p.Operation))
	}
	if p.LastFailure != "" {
		fmt.Fprintf(tw, "last failure\t%s\n", p.LastFailure)
	}
	for _, op := range p.Operations {
		fmt.Fprintf(tw, "done\t%s\n", operationText(op))
	}
	if !p.StartedAt.IsZero() {
		fmt.Fprintf(tw, "started\t%s\n", p.StartedAt.Local().Format(time.DateTime))
	}
	fmt.Fprintf(tw, "source\t%s\n", sourceText(p.Source, p.QueryError))
	fmt.Fprintf(tw, "workers\t%s\n", workersText(p.Workers, time.Now()))
	return tw.Flush()
}

// operationLines are the lines of the child that runs an operation: where it is and the wait
// it is in.
func operationLines(tw io.Writer, p starter.Progress) {
	if p.Phase != "" {
		fmt.Fprintf(tw, "  phase\t%s\n", p.Phase)
	}
	if p.Step != "" {
		fmt.Fprintf(tw, "  step\t%s\n", p.Step)
	}
	if p.UPID != "" {
		fmt.Fprintf(tw, "  task\t%s\n", p.UPID)
	}
	if p.ActivityID != "" {
		fmt.Fprintf(tw, "  wait\t%s\n", waitLine(p.Wait))
	}
	if p.LastFailure != "" {
		fmt.Fprintf(tw, "  last failure\t%s\n", p.LastFailure)
	}
}

// requestText is a request the entity has yet to answer, and what it waits for: "create,
// answered when the create that runs ends", "delete, waiting for the change that runs to end".
func requestText(r proxyvm.PendingRequest, op *proxyvm.OperationRecord) string {
	switch {
	case op == nil:
		return r.Kind + ", waiting for its operation to start"
	case r.Served:
		return fmt.Sprintf("%s, answered when the %s that runs ends", r.Kind, op.Kind)
	}
	return fmt.Sprintf("%s, waiting for the %s that runs to end", r.Kind, op.Kind)
}

// desiredText is what was asked of a proxy: "present: image debian13, machine type small".
func desiredText(d proxyvm.DesiredState) string {
	var parts []string
	for _, p := range []struct{ name, value string }{
		{"name", d.Name}, {"image", d.Image}, {"machine type", d.MachineType}, {"zone", d.Zone},
		{"user-data sha256", clip(d.UserDataSHA256, 13)}, {"instance-id", d.InstanceID},
	} {
		if p.value != "" {
			parts = append(parts, p.name+" "+p.value)
		}
	}
	state := "absent"
	if d.Present {
		state = "present"
	}
	if len(parts) == 0 {
		return state
	}
	return state + ": " + strings.Join(parts, ", ")
}

// observedText is what pveflow last saw of a proxy's VM: "VM 124973 on node pve1, running,
// IPv4 10.0.0.5 (checked 12:00:00)".
func observedText(o proxyvm.ObservedState) string {
	if o.VMID == 0 {
		return ""
	}
	text := fmt.Sprintf("VM %d on node %s", o.VMID, cmp.Or(o.Node, "?"))
	if o.State != "" {
		text += ", " + o.State
	}
	if o.IPv4 != "" {
		text += ", IPv4 " + o.IPv4
	}
	if o.IPv6 != "" {
		text += ", IPv6 " + o.IPv6
	}
	if !o.CheckedAt.IsZero() {
		text += " (checked " + o.CheckedAt.Local().Format(time.DateTime) + ")"
	}
	return text
}

// kindText is an operation's kind and why it ran: "change (requested)"; the kind alone when no
// worker answered why.
func kindText(op proxyvm.OperationRecord) string {
	if op.Reason == "" {
		return op.Kind
	}
	return fmt.Sprintf("%s (%s)", op.Kind, op.Reason)
}

// operationText is one operation of a proxy: "#2 change (requested) completed 2026-05-01
// 12:00:00 to 12:01:30".
func operationText(op proxyvm.OperationRecord) string {
	text := fmt.Sprintf("#%d %s %s %s", op.Seq, kindText(op), cmp.Or(op.Outcome, "running"), op.StartedAt.Local().Format(time.DateTime))
	if !op.ClosedAt.IsZero() {
		text += " to " + op.ClosedAt.Local().Format(time.TimeOnly)
	}
	if op.Error != "" {
		text += ": " + op.Error
	}
	return text
}

// sourceText says where a status comes from.
func sourceText(source, queryError string) string {
	if source == starter.SourceQuery {
		return "live query"
	}
	return "described by Temporal (" + queryError + ")"
}

// workersText says who polls a workflow's task queue, as of now. A worker that stopped or died
// a moment ago is listed by Temporal for a minute; none took the workflow's due task.
func workersText(w starter.Workers, now time.Time) string {
	if w.Live() {
		return fmt.Sprintf("a worker polls task queue %s (last poll %s ago)", w.TaskQueue, now.Sub(w.LastPoll).Truncate(time.Second))
	}
	return w.NoLiveWorker(now)
}

func (c *cli) resultCommand() *cobra.Command {
	var uid string
	var del bool
	cmd := &cobra.Command{
		Use:   "result --uid UID [--delete]",
		Short: "Wait for the create (or the delete) of a UID and print its result",
		Long: `Waits for the latest CreateProxy (with --delete, DeleteProxy) of the proxy of UID, workflow
proxy/<UID>/create (/delete), to close and prints its result, as create --wait (delete --wait)
does. An operation the proxy's entity has yet to start (its request waits for a worker, as
right after a worker's restart, or for the operation before it) is waited for as long as the
entity runs and, when a worker answers, has it to run; a UID no request was sent for, or whose
entity neither runs nor has asked for the operation, fails at once.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, uid); err != nil {
				return err
			}
			return c.result(cmd.Context(), uid, opOf(del))
		},
	}
	proxyOpFlags(cmd, &uid, &del)
	return cmd
}

func (c *cli) result(ctx context.Context, uid string, op starter.Op) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	if op == starter.Delete {
		res, err := waitFor(ctx, c, uid, starter.Delete, c.starter.DeleteResult)
		if err != nil {
			return err
		}
		return c.printDeleted(uid, res)
	}
	res, err := waitFor(ctx, c, uid, starter.Create, c.starter.CreateResult)
	if err != nil {
		return err
	}
	return c.printCreated(res)
}

// phases are the phases of a proxy, which list --phase takes.
var phases = []string{
	proxyvm.ProxyAbsent, proxyvm.ProxyCreating, proxyvm.ProxyPresent, proxyvm.ProxyChanging,
	proxyvm.ProxyHealing, proxyvm.ProxyDeleting, proxyvm.ProxyFailed,
}

func (c *cli) listCommand() *cobra.Command {
	var phase string
	cmd := &cobra.Command{
		Use:   "list [--phase P]",
		Short: "The proxies, newest first, all or those in one phase",
		Long: `Lists the proxies (their entities, workflows proxy/<UID>), newest first, from Temporal's
visibility: all, or those in one phase, with the node and VMID of their VM; ENTITY is the state
of the entity's workflow (running while it holds the proxy), not of the VM, which ls shows. A
UID whose every request was refused holds no proxy and is not listed. The phases are
` + strings.Join(phases, ", ") + `.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if phase != "" && !slices.Contains(phases, phase) {
				return usageError{fmt.Errorf("list: --phase %q is not a phase: want one of %s", phase, strings.Join(phases, ", "))}
			}
			return c.list(cmd.Context(), phase)
		},
	}
	cmd.Flags().StringVar(&phase, "phase", "", "list only the proxies in phase `P`, such as creating or failed")
	_ = cmd.RegisterFlagCompletionFunc("phase", cobra.FixedCompletions(phases, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (c *cli) list(ctx context.Context, phase string) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	proxies, err := c.starter.List(ctx, phase)
	if err != nil {
		return err
	}
	if c.json {
		if proxies == nil {
			proxies = []starter.Proxy{} // [] rather than null
		}
		return c.printJSON(proxies)
	}
	if len(proxies) == 0 {
		_, err := fmt.Fprintln(c.stdout, "no proxies")
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	// ENTITY is the state of the proxy's workflow, not of its VM (ls's VM STATUS).
	fmt.Fprintln(tw, "UID\tNAME\tPHASE\tNODE\tVMID\tENTITY\tSTARTED")
	for _, p := range proxies {
		vmid := "-"
		if p.VMID != 0 {
			vmid = fmt.Sprint(p.VMID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.UID, cmp.Or(p.Name, "-"), cmp.Or(p.Phase, "-"), cmp.Or(p.Node, "-"), vmid, p.Status,
			p.StartTime.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func (c *cli) demoCommand() *cobra.Command {
	var in proxyvm.ProxySpec
	cmd := &cobra.Command{
		Use:   "demo [flags]",
		Short: "Create a proxy with a new UID, wait for it, then delete it",
		Long: `Asks for a proxy with a new UID, waits for it, then asks for its delete and waits for it: what
make run shows. A create that fails is deleted all the same, so the demo leaves nothing
behind.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A random (version 4) UUID: the form of a Kubernetes object's UID.
			in.UID = uuid.NewString()
			return c.demo(cmd.Context(), in)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.Image, "image", "debian13", "the `IMAGE`: a template of the configuration")
	f.StringVar(&in.MachineType, "machine-type", "small", "the machine `TYPE` of the configuration")
	f.StringVar(&in.Zone, "zone", "", "the `NODE` to place the VM on")
	return cmd
}

// demo creates a proxy with a new UID, waits for it, and deletes it again: what `make run`
// shows. A create that fails is deleted all the same, so the demo leaves nothing behind.
func (c *cli) demo(ctx context.Context, in proxyvm.ProxySpec) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	c.say("demo: creating proxy %s", in.UID)
	created, createErr := awaitRequest(ctx, c, starter.Create, in.UID, func(ctx context.Context) (proxyvm.CreateProxyResult, error) {
		return sendAndGet[proxyvm.CreateProxyResult](ctx, starter.Create, in.UID, func(ctx context.Context) (*starter.Request, error) {
			return c.starter.Create(ctx, in)
		})
	})
	switch {
	case createErr != nil && ctx.Err() != nil:
		return createErr
	case createErr != nil:
		c.say("demo: the create failed; deleting what it left behind")
	case !c.json:
		if err := c.printCreated(created); err != nil {
			return err
		}
	}

	c.say("demo: deleting proxy %s", in.UID)
	del := proxyvm.DeleteProxyInput{UID: in.UID}
	deleted, err := awaitRequest(ctx, c, starter.Delete, in.UID, func(ctx context.Context) (proxyvm.DeleteProxyResult, error) {
		return sendAndGet[proxyvm.DeleteProxyResult](ctx, starter.Delete, in.UID, func(ctx context.Context) (*starter.Request, error) {
			return c.starter.Delete(ctx, del)
		})
	})
	if err != nil {
		return errors.Join(createErr, err)
	}
	if c.json {
		return c.printJSON(struct {
			UID     string                    `json:"uid"`
			Created proxyvm.CreateProxyResult `json:"created"`
			Deleted proxyvm.DeleteProxyResult `json:"deleted"`
		}{in.UID, created, deleted})
	}
	if err := c.printDeleted(in.UID, deleted); err != nil {
		return err
	}
	return createErr
}

// checkUID requires a valid --uid: an invalid one is a usage error, found before pveflow
// connects to Temporal.
func checkUID(cmd *cobra.Command, uid string) error {
	if uid == "" {
		return usageError{fmt.Errorf("%s: --uid is required", cmd.Name())}
	}
	if err := proxy.ValidateUID(uid); err != nil {
		return usageError{fmt.Errorf("%s: --uid: %w", cmd.Name(), err)}
	}
	return nil
}

// proxyOpFlags are the flags of a command about one workflow of a proxy: --uid, and --delete
// for the delete rather than the create.
func proxyOpFlags(cmd *cobra.Command, uid *string, del *bool) {
	cmd.Flags().StringVar(uid, "uid", "", "the proxy's `UID` (required)")
	cmd.Flags().BoolVar(del, "delete", false, "the proxy's delete rather than its create")
}

// opOf is the delete when del, else the create.
func opOf(del bool) starter.Op {
	if del {
		return starter.Delete
	}
	return starter.Create
}

// waitFor waits for the result of the workflow op of uid, showing the progress of the
// operation the proxy runs on stderr about once a second, and saying so when no live worker
// polls its task queue: before the entity has started op too.
func waitFor[T any](ctx context.Context, c *cli, uid string, op starter.Op, result func(context.Context, string) (T, error)) (T, error) {
	line := &progressLine{w: c.stderr, width: c.terminalWidth()}
	defer line.clear()
	what := fmt.Sprintf("the %s of proxy %s", op, uid)
	res, err := await(ctx, c, what, line, func(ctx context.Context) (T, error) { return result(ctx, uid) }, watchProxy(c, uid, line))
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("stopped waiting; the %s of proxy %s goes on: follow it with '%s'", op, uid, resultCommand(op, uid))
	case err != nil:
		return res, failed{op: op, uid: uid, err: err}
	}
	return res, nil
}

// noWorkerGrace is how long a command waits for a workflow before it tells that no live worker
// polls the task queue: a worker started a moment before may not have polled yet.
const noWorkerGrace = 2 * time.Second

// progressTimeout bounds one look at how a wait goes, so a slow one cannot hold up the result.
const progressTimeout = 5 * time.Second

// await returns what call returns, which waits for a workflow: what, such as "the create of
// proxy u-1". About once a second meanwhile it calls watch, which may show progress and
// returns the workers of the workflow's task queue; when no live one polls it past
// noWorkerGrace, await says on stderr, once, what it waits for and that no worker polls.
func await[T any](ctx context.Context, c *cli, what string, line *progressLine, call func(context.Context) (T, error),
	watch func(context.Context) (starter.Workers, error),
) (T, error) {
	type outcome struct {
		res T
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := call(ctx)
		done <- outcome{res, err}
	}()
	note := noWorkerNote{what: what, line: line, start: time.Now()}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		wctx, cancel := context.WithTimeout(ctx, progressTimeout)
		w, err := watch(wctx)
		cancel()
		if err == nil {
			note.judge(w)
		}
		select {
		case o := <-done:
			return o.res, o.err
		case <-tick.C:
		}
	}
}

// noWorkerNote says on line, once, that no live worker polls the task queue of what a command
// waits for (what, such as "the create of proxy u-1"), past noWorkerGrace from start.
type noWorkerNote struct {
	what  string
	line  *progressLine
	start time.Time
	told  bool
}

// judge tells when w, the workers as of now, has no live one and it is time.
func (n *noWorkerNote) judge(w starter.Workers) {
	if !w.Live() && !n.told && time.Since(n.start) >= noWorkerGrace {
		n.line.note(fmt.Sprintf("pveflow: waiting for %s, but %s", n.what, w.NoLiveWorker(time.Now())))
		n.told = true
	}
}

// awaitWorkflow is await for a workflow with no progress to show, on the CLI's task queue: a
// read's or a garbage collection's, which call starts under the context it is given.
func awaitWorkflow[T any](ctx context.Context, c *cli, what string, call func(context.Context) (T, error)) (T, error) {
	var started atomic.Pointer[string]
	ctx = starter.WithStarted(ctx, func(id string) { started.Store(&id) })
	return await(ctx, c, what, &progressLine{w: c.stderr}, call, func(ctx context.Context) (starter.Workers, error) {
		if id := started.Load(); id != nil {
			return c.starter.WorkflowWorkers(ctx, *id)
		}
		return c.starter.Workers(ctx)
	})
}

func (c *cli) printAccepted(req *starter.Request) error {
	if c.json {
		return c.printJSON(struct {
			UID        string `json:"uid"`
			Kind       string `json:"kind"`
			UpdateID   string `json:"updateID"`
			WorkflowID string `json:"workflowID"`
		}{req.UID, req.Kind, req.UpdateID, core.ProxyWorkflowID(req.UID)})
	}
	_, err := fmt.Fprintf(c.stdout, "%s of proxy %s accepted by workflow %s (update %s); follow it with 'pveflow status --uid %s'\n",
		req.Kind, req.UID, core.ProxyWorkflowID(req.UID), req.UpdateID, req.UID)
	return err
}

func (c *cli) printCreated(res proxyvm.CreateProxyResult) error {
	if c.json {
		return c.printJSON(res)
	}
	ipv6 := ""
	if res.IPv6 != "" {
		ipv6 = ", IPv6 " + res.IPv6
	}
	fmt.Fprintf(c.stdout, "proxy created: %s on %s, IPv4 %s%s\n", res.ProviderID, res.Node, cmp.Or(res.IPv4, "-"), ipv6)
	return c.printWarnings(res.Warnings)
}

func (c *cli) printChanged(res proxyvm.ChangeProxyResult) error {
	if c.json {
		return c.printJSON(res)
	}
	what := "nothing changed: the VM matched"
	if len(res.Changed) > 0 {
		what = "changed " + strings.Join(res.Changed, ", ")
	}
	restart := "the guest was not restarted"
	switch {
	case res.Rebuilt:
		restart = "the VM was rebuilt"
	case res.Restarted:
		restart = "the guest was restarted"
	}
	fmt.Fprintf(c.stdout, "proxy changed: %s on %s: %s; %s; IPv4 %s\n",
		proxy.FormatProviderID(res.VMID, res.Name), res.Node, what, restart, cmp.Or(res.IPv4, "-"))
	return c.printWarnings(res.Warnings)
}

func (c *cli) printDeleted(uid string, res proxyvm.DeleteProxyResult) error {
	if c.json {
		return c.printJSON(res)
	}
	fmt.Fprintf(c.stdout, "proxy deleted: %s\n", uid)
	for _, vm := range res.Destroyed {
		fmt.Fprintf(c.stdout, "  destroyed %s\n", vm)
	}
	if len(res.Skipped) > 0 {
		fmt.Fprintf(c.stdout, "  left alone (the proxy's name without its mark): VMs %v\n", res.Skipped)
	}
	return c.printWarnings(res.Warnings)
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// say tells a person what happens, on stderr; with --json stdout holds only the result.
func (c *cli) say(format string, args ...any) {
	fmt.Fprintf(c.stderr, format+"\n", args...)
}

// resultCommand is the command line that waits for the workflow op of uid.
func resultCommand(op starter.Op, uid string) string {
	if op == starter.Delete {
		return "pveflow result --delete --uid " + uid
	}
	return "pveflow result --uid " + uid
}
