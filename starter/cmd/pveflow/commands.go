package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

func (c *cli) createCommand() *cobra.Command {
	var in workflows.CreateProxyInput
	var userDataFile string
	var wait bool
	cmd := &cobra.Command{
		Use:   "create --uid UID [flags]",
		Short: "Start creating the proxy of a UID, or join the create that runs",
		Long: `Starts the CreateProxy workflow of the proxy of UID, or joins the one that runs. With --wait,
waits for its VM and prints it: provider ID, node and IPv4.

The user-data file holds at most 65536 bytes (64 KiB); it is sent to the workflow and never
printed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, in.UID); err != nil {
				return err
			}
			if userDataFile != "" {
				// The file may hold secrets: an error names the file, never its content.
				data, err := os.ReadFile(userDataFile)
				if err != nil {
					return usageError{fmt.Errorf("create: --user-data-file: %w", err)}
				}
				in.UserData = string(data)
				if err := workflows.ValidateUserData(in.UserData); err != nil {
					return usageError{fmt.Errorf("create: --user-data-file %s: %w", userDataFile, err)}
				}
			}
			return startAndWait(cmd.Context(), c, starter.Create, in.UID, wait,
				func(ctx context.Context) (client.WorkflowRun, error) { return c.starter.Create(ctx, in) },
				func(ctx context.Context, uid string) (workflows.CreateProxyResult, error) {
					return c.starter.CreateResult(ctx, uid)
				},
				c.printCreated)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.UID, "uid", "", "the proxy's `UID` (required)")
	f.StringVar(&in.Name, "name", "", "the VM's `NAME`; the default is derived from the UID")
	f.StringVar(&in.Zone, "zone", "", "the `NODE` to place the VM on; the default is the node with the most free memory")
	f.StringVar(&in.Image, "image", "", "the `IMAGE`: a template of the configuration")
	f.StringVar(&in.MachineType, "machine-type", "", "the machine `TYPE` of the configuration: cores, memory, disk")
	f.StringVar(&in.Region, "region", "", "the `REGION`, kept in the VM's mark")
	f.StringVar(&userDataFile, "user-data-file", "", "cloud-init user-data `FILE` of at most 64 KiB, for the VM's seed ISO")
	f.BoolVar(&wait, "wait", false, "wait for the VM and print it")
	return cmd
}

func (c *cli) deleteCommand() *cobra.Command {
	var in workflows.DeleteProxyInput
	var wait bool
	cmd := &cobra.Command{
		Use:   "delete --uid UID [flags]",
		Short: "Start deleting the proxy of a UID; a create that still runs is cancelled",
		Long: `Starts the DeleteProxy workflow of the proxy of UID, which cancels a create of it that still
runs, destroys its VM and removes its seed ISO. The UID alone finds the proxy's VM. --name (or
the name in --provider-id) is needed only for the seed ISO of a proxy created with --name
before pveflow found seed ISOs by UID. With --wait, waits for the delete and prints what it
destroyed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, in.UID); err != nil {
				return err
			}
			return startAndWait(cmd.Context(), c, starter.Delete, in.UID, wait,
				func(ctx context.Context) (client.WorkflowRun, error) { return c.starter.Delete(ctx, in) },
				func(ctx context.Context, uid string) (workflows.DeleteProxyResult, error) {
					return c.starter.DeleteResult(ctx, uid)
				},
				func(res workflows.DeleteProxyResult) error { return c.printDeleted(in.UID, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.UID, "uid", "", "the proxy's `UID` (required)")
	f.StringVar(&in.Name, "name", "", "the `NAME` the proxy was created with, for the seed ISO of an old proxy")
	f.StringVar(&in.ProviderID, "provider-id", "", "the proxy's provider `ID`, vms/<vmid>/<name>")
	f.BoolVar(&wait, "wait", false, "wait for the delete and print what it destroyed")
	return cmd
}

// startAndWait connects, starts op for uid, and either prints the started run or, with wait,
// waits for its result with a progress line and prints it with show. start and result run
// once connected, when c.starter is set.
func startAndWait[T any](ctx context.Context, c *cli, op starter.Op, uid string, wait bool,
	start func(context.Context) (client.WorkflowRun, error),
	result func(context.Context, string) (T, error),
	show func(T) error,
) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	run, err := start(ctx)
	if err != nil {
		return err
	}
	if !wait {
		return c.printStarted(op, uid, run)
	}
	res, err := waitFor(ctx, c, uid, op, result)
	if err != nil {
		return err
	}
	return show(res)
}

func (c *cli) statusCommand() *cobra.Command {
	var uid string
	var del bool
	cmd := &cobra.Command{
		Use:   "status --uid UID [--delete]",
		Short: "Where the create (or the delete) of a UID is, and what it waits for",
		Long: `Says where the create (or, with --delete, the delete) of UID is, and what it waits for: from
the workflow's status query, or, when no worker answers it, from what Temporal keeps (its
search attributes and pending wait), with when a worker last polled its task queue.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, uid); err != nil {
				return err
			}
			return c.status(cmd.Context(), uid, opOf(del))
		},
	}
	proxyOpFlags(cmd, &uid, &del)
	return cmd
}

func (c *cli) status(ctx context.Context, uid string, op starter.Op) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	p, err := c.starter.Progress(ctx, uid, op)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(p)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "proxy\t%s (%s)\n", p.UID, p.Name)
	fmt.Fprintf(tw, "%s\t%s\n", op, p.State)
	fmt.Fprintf(tw, "phase\t%s\n", p.Phase)
	if p.Step != "" {
		fmt.Fprintf(tw, "step\t%s\n", p.Step)
	}
	if p.VMID != 0 {
		fmt.Fprintf(tw, "vm\t%d on node %s\n", p.VMID, p.Node)
	}
	if p.UPID != "" {
		fmt.Fprintf(tw, "task\t%s\n", p.UPID)
	}
	if p.ActivityID != "" {
		fmt.Fprintf(tw, "wait\t%s\n", waitLine(p.Wait))
	}
	if p.LastFailure != "" {
		fmt.Fprintf(tw, "last failure\t%s\n", p.LastFailure)
	}
	if p.LastError != "" {
		fmt.Fprintf(tw, "error\t%s\n", p.LastError)
	}
	fmt.Fprintf(tw, "started\t%s\n", p.StartedAt.Local().Format(time.DateTime))
	fmt.Fprintf(tw, "source\t%s\n", sourceText(p))
	fmt.Fprintf(tw, "workers\t%s\n", workersText(p, time.Now()))
	return tw.Flush()
}

// sourceText says where a status comes from.
func sourceText(p starter.Progress) string {
	if p.Source == starter.SourceQuery {
		return "live query"
	}
	return "described by Temporal (" + p.QueryError + "): no step, task or error"
}

// workersText says who polls a workflow's task queue, as of now. A worker that stopped or died
// a moment ago still counts as a poller for a few minutes; it did not answer the query.
func workersText(p starter.Progress, now time.Time) string {
	w := p.Workers
	ago := now.Sub(w.LastPoll).Truncate(time.Second)
	switch {
	case w.Pollers == 0:
		return fmt.Sprintf("no worker polls task queue %s", w.TaskQueue)
	case p.Source != starter.SourceQuery:
		return fmt.Sprintf("no worker polls task queue %s: the last poll was %s ago", w.TaskQueue, ago)
	}
	return fmt.Sprintf("a worker polls task queue %s (last poll %s ago)", w.TaskQueue, ago)
}

func (c *cli) resultCommand() *cobra.Command {
	var uid string
	var del bool
	cmd := &cobra.Command{
		Use:   "result --uid UID [--delete]",
		Short: "Wait for the create (or the delete) of a UID and print its result",
		Args:  noArgs,
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

// phases are the phases of workflows.Status, which list --phase takes.
var phases = []string{
	workflows.PhaseValidating, workflows.PhaseLookingUp, workflows.PhasePlacing,
	workflows.PhaseQueued, workflows.PhaseCloning, workflows.PhaseSeeding, workflows.PhaseConfiguring,
	workflows.PhaseStarting, workflows.PhaseBooting, workflows.PhaseCreated,
	workflows.PhaseStopping, workflows.PhaseDestroying, workflows.PhaseCleaning, workflows.PhaseDeleted,
	workflows.PhaseFailed, workflows.PhaseCancelled,
}

func (c *cli) listCommand() *cobra.Command {
	var phase string
	cmd := &cobra.Command{
		Use:   "list [--phase P]",
		Short: "The proxy workflows, newest first, all or those in one phase",
		Long: `Lists the CreateProxy and DeleteProxy workflows, newest first, from Temporal's visibility: all,
or those in one phase. The phases are ` + strings.Join(phases, ", ") + `.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if phase != "" && !slices.Contains(phases, phase) {
				return usageError{fmt.Errorf("list: --phase %q is not a phase: want one of %s", phase, strings.Join(phases, ", "))}
			}
			return c.list(cmd.Context(), phase)
		},
	}
	cmd.Flags().StringVar(&phase, "phase", "", "list only the workflows in phase `P`, such as cloning or failed")
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
		_, err := fmt.Fprintln(c.stdout, "no proxy workflows")
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "UID\tNAME\tOP\tPHASE\tNODE\tVMID\tSTATE\tSTARTED")
	for _, p := range proxies {
		vmid := "-"
		if p.VMID != 0 {
			vmid = fmt.Sprint(p.VMID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.UID, p.Name, p.Op, p.Phase, cmp.Or(p.Node, "-"), vmid, p.Status,
			p.StartTime.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func (c *cli) demoCommand() *cobra.Command {
	var in workflows.CreateProxyInput
	cmd := &cobra.Command{
		Use:   "demo [flags]",
		Short: "Create a proxy with a new UID, wait for it, then delete it",
		Long: `Creates a proxy with a new UID, waits for it, then deletes it and waits for the delete: what
make run shows. A create that fails is deleted all the same, so the demo leaves nothing
behind.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in.UID = newUID()
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
func (c *cli) demo(ctx context.Context, in workflows.CreateProxyInput) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	c.say("demo: creating proxy %s", in.UID)
	if _, err := c.starter.Create(ctx, in); err != nil {
		return err
	}
	created, createErr := waitFor(ctx, c, in.UID, starter.Create, c.starter.CreateResult)
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
	if _, err := c.starter.Delete(ctx, workflows.DeleteProxyInput{UID: in.UID, ProviderID: created.ProviderID}); err != nil {
		return errors.Join(createErr, err)
	}
	deleted, err := waitFor(ctx, c, in.UID, starter.Delete, c.starter.DeleteResult)
	if err != nil {
		return errors.Join(createErr, err)
	}
	if c.json {
		return c.printJSON(struct {
			UID     string                      `json:"uid"`
			Created workflows.CreateProxyResult `json:"created"`
			Deleted workflows.DeleteProxyResult `json:"deleted"`
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

// waitFor waits for the result of the workflow op of uid, showing its progress on stderr about
// once a second, and saying so when no worker polls its task queue.
func waitFor[T any](ctx context.Context, c *cli, uid string, op starter.Op, result func(context.Context, string) (T, error)) (T, error) {
	line := &progressLine{w: c.stderr, width: c.terminalWidth()}
	defer line.clear()
	what := fmt.Sprintf("the %s of proxy %s", op, uid)
	res, err := await(ctx, c, what, line,
		func(ctx context.Context) (T, error) { return result(ctx, uid) },
		func(ctx context.Context) (starter.Workers, error) {
			p, err := c.starter.Progress(ctx, uid, op)
			if err != nil {
				// The workflow may not have run its first task yet; the next tick tries again.
				return starter.Workers{}, err
			}
			line.show(p, time.Now())
			return p.Workers, nil
		})
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("stopped waiting; the %s of proxy %s goes on: follow it with '%s'", op, uid, resultCommand(op, uid))
	case err != nil:
		return res, failed{op: op, uid: uid, err: err}
	}
	return res, nil
}

// noWorkerGrace is how long a command waits for a workflow before it tells that no worker polls
// the task queue: a worker started a moment before may not have polled yet.
const noWorkerGrace = 2 * time.Second

// progressTimeout bounds one look at how a wait goes, so a slow one cannot hold up the result.
const progressTimeout = 5 * time.Second

// await returns what call returns, which waits for a workflow: what, such as "the create of
// proxy u-1". About once a second meanwhile it calls watch, which may show progress and
// returns the workers of the workflow's task queue; when none polls it past noWorkerGrace,
// await says on stderr, once, what it waits for and that no worker polls.
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
	start := time.Now()
	told := false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		wctx, cancel := context.WithTimeout(ctx, progressTimeout)
		w, err := watch(wctx)
		cancel()
		if err == nil && w.Pollers == 0 && !told && time.Since(start) >= noWorkerGrace {
			line.note(fmt.Sprintf("pveflow: waiting for %s, but no worker polls task queue %s", what, w.TaskQueue))
			told = true
		}
		select {
		case o := <-done:
			return o.res, o.err
		case <-tick.C:
		}
	}
}

// awaitWorkflow is await for a workflow with no progress to show, on the CLI's task queue.
func awaitWorkflow[T any](ctx context.Context, c *cli, what string, call func(context.Context) (T, error)) (T, error) {
	return await(ctx, c, what, &progressLine{w: c.stderr}, call, c.starter.Workers)
}

func (c *cli) printStarted(op starter.Op, uid string, run client.WorkflowRun) error {
	if c.json {
		return c.printJSON(struct {
			WorkflowID string `json:"workflowID"`
			RunID      string `json:"runID"`
		}{run.GetID(), run.GetRunID()})
	}
	_, err := fmt.Fprintf(c.stdout, "%s of proxy %s running: workflow %s, run %s\n", op, uid, run.GetID(), run.GetRunID())
	return err
}

func (c *cli) printCreated(res workflows.CreateProxyResult) error {
	if c.json {
		return c.printJSON(res)
	}
	_, err := fmt.Fprintf(c.stdout, "proxy created: %s on %s, IPv4 %s\n", res.ProviderID, res.Node, res.IPv4)
	return err
}

func (c *cli) printDeleted(uid string, res workflows.DeleteProxyResult) error {
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
	return nil
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

// newUID is a random (version 4) UUID, the form of a Kubernetes object's UID.
func newUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
