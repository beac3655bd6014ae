package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows"
)

// The read commands: get, ls and check. Each runs a short read workflow, and its help
// (`pveflow get --help`) says more than its entry in the main help.

const getDetails = `Finds the VM of a proxy and says what it is doing: Running (with its IPv4), Provisioning
(running, no IPv4 yet) or Stopped, with its provider ID, node, VMID, UID and creation time
from its mark. It runs the GetProxy workflow, which only reads: it needs no create to have
run, and runs beside a create or delete of the same proxy.

Exits 7 when there is no such VM (absent, its VMID now another VM's, or not marked as the
proxy's), 4 when the VM is locked, being cloned or of unknown status (ask again later), 3 on
bad input or when two VMs carry the proxy's mark.
`

const lsDetails = `Lists the VMs on the Proxmox cluster that carry pveflow's mark: provider ID, node, status (from
PVE's status cache, which lags by seconds), UID and creation time. It runs the ListProxies
workflow: one cluster resources read, and one config read per VM with pveflow's tag or name.
A VM whose config cannot be read is skipped and named on stderr. (list lists workflows.)
`

const checkDetails = `Checks every configured node: the PVE version, the node's status, the ISO storage (on the node,
holding ISO images) and the templates a proxy on the node is cloned from. It runs the
CheckHealth workflow now; with --last it prints the latest completed run of the health
schedule the worker keeps (worker -health-every) instead.

An unhealthy node has a reason: Unauthorized, Forbidden, Unreachable, Timeout, APIError,
StorageNotFound or TemplateNotFound. Exits 8 when a node is unhealthy.
`

func (c *cli) get(ctx context.Context, args []string) error {
	fs := c.flagSet("get")
	uid := fs.String("uid", "", "")
	providerID := fs.String("provider-id", "", "")
	if err := parse(fs, args); err != nil {
		return err
	}
	key := *uid + *providerID
	switch {
	case (*uid == "") == (*providerID == ""):
		return usageError{errors.New("get: give one of --uid and --provider-id")}
	case *uid != "":
		if err := proxy.ValidateUID(*uid); err != nil {
			return usageError{fmt.Errorf("get: --uid: %w", err)}
		}
	default:
		if _, _, err := proxy.ParseProviderID(*providerID); err != nil {
			return usageError{fmt.Errorf("get: --provider-id: %w", err)}
		}
	}
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	res, err := c.starter.GetProxy(ctx, key)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(res)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "proxy\t%s\n", res.ProviderID)
	fmt.Fprintf(tw, "state\t%s\n", res.State)
	fmt.Fprintf(tw, "vm\t%d on node %s\n", res.VMID, res.Node)
	if res.IPv4 != "" {
		fmt.Fprintf(tw, "ipv4\t%s\n", res.IPv4)
	}
	fmt.Fprintf(tw, "uid\t%s\n", orDash(res.UID))
	fmt.Fprintf(tw, "created\t%s\n", timeOrDash(res.CreatedAt))
	return tw.Flush()
}

func (c *cli) ls(ctx context.Context, args []string) error {
	fs := c.flagSet("ls")
	if err := parse(fs, args); err != nil {
		return err
	}
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	res, err := c.starter.ListProxies(ctx)
	if err != nil {
		return err
	}
	if len(res.Unreadable) > 0 {
		c.say("pveflow: skipped VMs whose config could not be read (see the worker's log): %v", res.Unreadable)
	}
	if c.json {
		return c.printJSON(res)
	}
	if len(res.Proxies) == 0 {
		_, err := fmt.Fprintln(c.stdout, "no VMs carry pveflow's mark")
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER ID\tNODE\tSTATUS\tUID\tCREATED")
	for _, p := range res.Proxies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ProviderID, p.Node, p.Status, orDash(p.UID), timeOrDash(p.CreatedAt))
	}
	return tw.Flush()
}

// unhealthy is check's error when a node is unhealthy: the result is printed, and the exit code
// says so.
type unhealthy struct{ nodes []string }

func (u unhealthy) Error() string {
	return "unhealthy: " + strings.Join(u.nodes, ", ")
}

func (c *cli) check(ctx context.Context, args []string) error {
	fs := c.flagSet("check")
	last := fs.Bool("last", false, "")
	if err := parse(fs, args); err != nil {
		return err
	}
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	read := c.starter.CheckHealth
	if *last {
		read = c.starter.LastHealth
	}
	res, err := read(ctx)
	if err != nil {
		return err
	}
	if err := c.printHealth(res); err != nil {
		return err
	}
	var bad []string
	for _, n := range res.Nodes {
		if !n.Healthy {
			bad = append(bad, n.Name)
		}
	}
	if len(bad) > 0 {
		return unhealthy{bad}
	}
	return nil
}

func (c *cli) printHealth(res workflows.CheckHealthResult) error {
	if c.json {
		return c.printJSON(res)
	}
	fmt.Fprintf(c.stdout, "checked at %s\n", res.CheckedAt.Local().Format(time.DateTime))
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHEALTH\tPVE\tISO STORAGE\tTEMPLATES\tMESSAGE")
	for _, n := range res.Nodes {
		health := "healthy"
		if !n.Healthy {
			health = n.Reason
		}
		storage := "-"
		if s := n.Details["isoStorage"]; s != "" && n.Details["isoStorageAvailGiB"] != "" {
			storage = fmt.Sprintf("%s (%s GiB free)", s, n.Details["isoStorageAvailGiB"])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, health, orDash(n.Details["pveVersion"]), storage,
			orDash(n.Details["templates"]), orDash(n.Message))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

// Exit codes of the read commands; `pveflow help` documents them beside the others.
const (
	exitNotFound  = 7
	exitUnhealthy = 8
)

// readExitCode is the exit code of a read command's error, or 0 when it is not one of theirs.
func readExitCode(err error) int {
	var u unhealthy
	switch {
	case errors.Is(err, starter.ErrNotFound):
		return exitNotFound
	case errors.As(err, &u):
		return exitUnhealthy
	}
	return 0
}
