package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

func (c *cli) create(ctx context.Context, args []string) error {
	fs := c.flagSet("create")
	var in workflows.CreateProxyInput
	fs.StringVar(&in.UID, "uid", "", "")
	fs.StringVar(&in.Name, "name", "", "")
	fs.StringVar(&in.Zone, "zone", "", "")
	fs.StringVar(&in.Image, "image", "", "")
	fs.StringVar(&in.MachineType, "machine-type", "", "")
	fs.StringVar(&in.Region, "region", "", "")
	userDataFile := fs.String("user-data-file", "", "")
	wait := fs.Bool("wait", false, "")
	if err := parseWithUID(fs, args, &in.UID); err != nil {
		return err
	}
	if *userDataFile != "" {
		// The file may hold secrets: an error names the file, never its content.
		data, err := os.ReadFile(*userDataFile)
		if err != nil {
			return fmt.Errorf("user-data: %w", err)
		}
		in.UserData = string(data)
		if err := workflows.ValidateUserData(in.UserData); err != nil {
			return usageError{fmt.Errorf("create: --user-data-file %s: %w", *userDataFile, err)}
		}
	}
	return startAndWait(ctx, c, starter.Create, in.UID, *wait,
		func(ctx context.Context) (client.WorkflowRun, error) { return c.starter.Create(ctx, in) },
		func(ctx context.Context, uid string) (workflows.CreateProxyResult, error) {
			return c.starter.CreateResult(ctx, uid)
		},
		c.printCreated)
}

func (c *cli) delete(ctx context.Context, args []string) error {
	fs := c.flagSet("delete")
	var in workflows.DeleteProxyInput
	fs.StringVar(&in.UID, "uid", "", "")
	fs.StringVar(&in.Name, "name", "", "")
	fs.StringVar(&in.ProviderID, "provider-id", "", "")
	wait := fs.Bool("wait", false, "")
	if err := parseWithUID(fs, args, &in.UID); err != nil {
		return err
	}
	return startAndWait(ctx, c, starter.Delete, in.UID, *wait,
		func(ctx context.Context) (client.WorkflowRun, error) { return c.starter.Delete(ctx, in) },
		func(ctx context.Context, uid string) (workflows.DeleteProxyResult, error) {
			return c.starter.DeleteResult(ctx, uid)
		},
		func(res workflows.DeleteProxyResult) error { return c.printDeleted(in.UID, res) })
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

func (c *cli) status(ctx context.Context, args []string) error {
	uid, op, err := c.parseProxyOp("status", args)
	if err != nil {
		return err
	}
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

func (c *cli) result(ctx context.Context, args []string) error {
	uid, op, err := c.parseProxyOp("result", args)
	if err != nil {
		return err
	}
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

func (c *cli) list(ctx context.Context, args []string) error {
	fs := c.flagSet("list")
	phase := fs.String("phase", "", "")
	if err := parse(fs, args); err != nil {
		return err
	}
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	proxies, err := c.starter.List(ctx, *phase)
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

// demo creates a proxy with a new UID, waits for it, and deletes it again: what `make run`
// shows. A create that fails is deleted all the same, so the demo leaves nothing behind.
func (c *cli) demo(ctx context.Context, args []string) error {
	fs := c.flagSet("demo")
	in := workflows.CreateProxyInput{UID: newUID()}
	fs.StringVar(&in.Image, "image", "debian13", "")
	fs.StringVar(&in.MachineType, "machine-type", "small", "")
	fs.StringVar(&in.Zone, "zone", "", "")
	if err := parse(fs, args); err != nil {
		return err
	}
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

// parseWithUID parses a command's flags and requires a valid --uid: an invalid one is a usage
// error, found before pveflow connects to Temporal.
func parseWithUID(fs *flag.FlagSet, args []string, uid *string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if *uid == "" {
		return usageError{fmt.Errorf("%s: --uid is required", fs.Name())}
	}
	if err := proxy.ValidateUID(*uid); err != nil {
		return usageError{fmt.Errorf("%s: --uid: %w", fs.Name(), err)}
	}
	return nil
}

// parseProxyOp parses the flags of a command about one workflow of a proxy: --uid, and
// --delete for the delete rather than the create.
func (c *cli) parseProxyOp(name string, args []string) (string, starter.Op, error) {
	fs := c.flagSet(name)
	var uid string
	fs.StringVar(&uid, "uid", "", "")
	del := fs.Bool("delete", false, "")
	if err := parseWithUID(fs, args, &uid); err != nil {
		return "", starter.Create, err
	}
	if *del {
		return uid, starter.Delete, nil
	}
	return uid, starter.Create, nil
}

// waitFor waits for the result of the workflow op of uid, showing its progress on stderr about
// once a second.
func waitFor[T any](ctx context.Context, c *cli, uid string, op starter.Op, result func(context.Context, string) (T, error)) (T, error) {
	type outcome struct {
		res T
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := result(ctx, uid)
		done <- outcome{res, err}
	}()
	line := &progressLine{w: c.stderr, width: c.terminalWidth()}
	defer line.clear()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		c.showProgress(ctx, line, uid, op)
		select {
		case o := <-done:
			switch {
			case ctx.Err() != nil:
				return o.res, fmt.Errorf("stopped waiting; the %s of proxy %s goes on: follow it with '%s'", op, uid, resultCommand(op, uid))
			case o.err != nil:
				return o.res, failed{op: op, uid: uid, err: o.err}
			}
			return o.res, nil
		case <-tick.C:
		}
	}
}

// progressTimeout bounds one progress read, so a slow one cannot hold up the result.
const progressTimeout = 5 * time.Second

func (c *cli) showProgress(ctx context.Context, line *progressLine, uid string, op starter.Op) {
	ctx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	p, err := c.starter.Progress(ctx, uid, op)
	if err != nil {
		return // the workflow may not have run its first task yet; the next tick tries again
	}
	line.show(p, time.Now())
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
