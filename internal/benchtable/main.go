// Command benchtable reads the output of `go test -bench` on its standard input, passes it
// through, and then prints pveflow's performance figures (docs/performance.md) as one table:
// each figure, what this run measured, its goal and whether the goal held. It exits with 1 when
// a goal was missed or a figure's benchmark did not run, so that `make bench` fails then.
//
//	go test -run '^$' -bench . ./... | go run ./internal/benchtable
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"golang.org/x/perf/benchfmt"
)

// A figure is one row of the table: a metric of one benchmark, by its name without
// "Benchmark" and GOMAXPROCS.
type figure struct {
	what, benchmark, unit string
	goal                  goal
	// missedBecause, for a goal of issue 21 that its figure, counted the way issue 32 corrected,
	// no longer meets, says why: the row says so and the target does not fail on it, as issue
	// 32 asks. Empty for every other goal, whose miss fails the target.
	missedBecause string
}

// A goal bounds a figure from above or below; the zero goal is no goal, for a figure reported
// for comparison.
type goal struct {
	bound   float64
	atLeast bool
	set     bool
}

func atMost(v float64) goal  { return goal{bound: v, set: true} }
func atLeast(v float64) goal { return goal{bound: v, atLeast: true, set: true} }

func (g goal) String() string {
	switch {
	case !g.set:
		return ""
	case g.atLeast:
		return "≥ " + format(g.bound)
	default:
		return "≤ " + format(g.bound)
	}
}

func (g goal) heldBy(v float64) bool {
	if g.atLeast {
		return v >= g.bound
	}
	return v <= g.bound
}

const (
	pace      = "Proxy_createAndDeleteAtTheSimulatorsPace"
	callCap   = "Proxy_oneProxyBelowTheCallCap"
	fleet     = "Fleet_proxiesCreatedAndDeletedAtOnce"
	fifty     = "Fleet_fiftyCreatesAtOnceOntoOneStorage"
	ceiling   = "Ceiling_noOpWorkflowsRunActivitiesAsFastAsTheServerAllows"
	on, off   = "/perStorage=4", "/admission=off"
	hundred   = fleet + "/proxies=100"
	threeHund = fleet + "/proxies=300"
	thousand  = "Fleet_thousandCreatesInFlight"
	cluster   = "Cluster_hundredProxiesCreatedAndDeletedAtOnce"
	care      = "Care_idleProxiesWatchedByTheObserverOrByThemselves"
	backlog   = "Care_aCreateBehindABacklogOfChecks"
	memory    = "Care_workerMemoryPerIdleEntity"
	outage    = "Care_aWorkerOutage"
	slots     = "Chaos_cloneSlotsBusyUnderWorkerKills"
	shipped   = "Shipped_hundredProxiesCreatedAndDeletedAtOnce"
)

// figures are issue 21's table, in its order, then issue 32's.
var figures = []figure{
	{"one create+delete at the simulator's pace, against a plain Go program", pace, "x-plain", atMost(1.05), ""},
	{"the same, against the floor of its waits", pace, "x-floor", atMost(1.15), ""},
	{"activity executions per create+delete", pace, "activity-executions/create+delete", atMost(40), ""},
	{"the same: the latest a task's end was seen, against 20% of its duration or 1 s", pace, "x-task-end-seen-bound", atMost(1), ""},
	{"history events per CreateProxy, one at a time (it starts the admission)", pace, "events/create", atMost(60), ""},
	{"one proxy below the default call cap (50 requests/s, 3 in flight): wall time against no cap", callCap, "x-uncapped", atMost(1.02), ""},
	{"the same: requests the cap held back", callCap, "held-requests", goal{}, ""},
	{"history events per DeleteProxy", pace, "events/delete", atMost(30), ""},
	{"one proxy created and deleted: history events of all its workflows (entity, create, delete, admission, observer), against issue 21's 60 + 30", pace, "events/proxy", atMost(90),
		"the entity's Updates and children and the admission's start, grant and release lie outside the two operations' histories issue 21 counted (the operations alone hold, above)"},
	{"the same: activity executions, local activities among them, against issue 21's 40", pace, "executions/proxy", atMost(40),
		"most of a create's and a delete's calls are local activities, one Proxmox request each, which issue 21 made of them to cut history events; they cost the server a marker each"},
	{"the same: local activity executions among them", pace, "local-activity-executions/proxy", goal{}, ""},
	{"the same: Proxmox requests, against the plain program's", pace, "x-plain-requests", goal{}, ""},
	{"100 proxies at once, admission on: events per CreateProxy, p50", hundred + on, "events/create-p50", atMost(60), ""},
	{"100 proxies at once, admission on: events per CreateProxy, max", hundred + on, "events/create-max", atMost(60), ""},
	{"100 proxies at once, admission on: wall time against the clone limit's floor", hundred + on, "x-floor", atMost(1.25), ""},
	{"100 proxies at once, admission on: the creates alone against their floor", hundred + on, "x-floor-creates", goal{}, ""},
	{"100 proxies at once, admission on: the cores the server kept busy, against its ceiling's", hundred + on, "x-ceiling-server-cores", goal{}, ""},
	{"100 proxies at once, admission on: the first clone's start after the requests, seconds", hundred + on, "s/first-clone", goal{}, ""},
	{"100 proxies at once, admission on: a clone slot free between one clone's end and the next's start, p50, ms", hundred + on, "ms/clone-turn-p50", goal{}, ""},
	{"100 proxies at once, admission on: history events of all the fleet's workflows, per proxy", hundred + on, "events/proxy", goal{}, ""},
	{"100 proxies at once, admission on: activity executions, local ones among them, per proxy", hundred + on, "executions/proxy", goal{}, ""},
	{"100 proxies at once, admission off: activity executions a second, local ones among them, against the ceiling's", hundred + off, "x-ceiling-executions", atLeast(0.8), ""},
	{"100 proxies at once, admission off: history events a second, against the ceiling's", hundred + off, "x-ceiling-events", goal{}, ""},
	{"100 proxies at once, admission off: the cores the server kept busy, against its ceiling's", hundred + off, "x-ceiling-server-cores", goal{}, ""},
	{"100 proxies at once, admission off: the cores the worker, simulator and clients kept busy", hundred + off, "process-cores", goal{}, ""},
	{"100 proxies at once, admission off: wall time against one proxy alone", hundred + off, "x-floor", goal{}, ""},
	{"make cluster's topology, 100 proxies at once, admission on: wall time against the clone limit's floor", cluster + on, "x-floor", atMost(1.25),
		"the floor is the simulator's task times alone, where issue 21's held pveflow's own time too; and on this machine the cluster's two server processes and PostgreSQL keep its cores at its ceiling's (below), while each clone slot's turn is two workflow tasks that cross them (the turn's p50, below)"},
	{"make cluster's topology, 100 proxies at once, admission on: events per CreateProxy, max", cluster + on, "events/create-max", atMost(60), ""},
	{"make cluster's topology, 100 proxies at once, admission on: the cores the cluster kept busy, against its ceiling's", cluster + on, "x-ceiling-server-cores", goal{}, ""},
	{"make cluster's topology, 100 proxies at once, admission on: the first clone's start after the requests, seconds", cluster + on, "s/first-clone", goal{}, ""},
	{"make cluster's topology, 100 proxies at once, admission on: a clone slot free between one clone's end and the next's start, p50, ms", cluster + on, "ms/clone-turn-p50", goal{}, ""},
	{"make cluster's topology, 100 proxies at once, admission off: activity executions a second, local ones among them, against the ceiling's", cluster + off, "x-ceiling-executions", atLeast(0.8), ""},
	{"make cluster's topology, 100 proxies at once, admission off: the cores the cluster kept busy, against its ceiling's", cluster + off, "x-ceiling-server-cores", goal{}, ""},
	{"make cluster's topology, 100 proxies at once, admission off: creates and deletes that failed", cluster + off, "failed", atMost(0), ""},
	{"make cluster's topology: the first proxy on a fresh cluster, created and deleted, seconds (the slowest of its runs)", cluster + on, "s/first-proxy", goal{}, ""},
	{"300 proxies at once, admission on: creates and deletes that failed", threeHund + on, "failed", atMost(0), ""},
	{"300 proxies at once, admission on: wall time against the clone limit's floor", threeHund + on, "x-floor", atMost(1.25), ""},
	{"300 proxies at once, admission off: creates and deletes that failed", threeHund + off, "failed", atMost(0), ""},
	{"1000 creates in flight, admission on (996 wait for a slot): peak RSS of the worker's process, MiB", thousand + on, "MiB-peak-rss", atMost(300), ""},
	{"1000 creates in flight, admission off (all poll their clone): peak RSS of the worker's process, MiB", thousand + off, "MiB-peak-rss", atMost(300), ""},
	{"50 creates onto one locking storage, admission on: seconds", fifty + on, "s/50creates", goal{}, ""},
	{"50 creates onto one locking storage, admission off: seconds", fifty + off, "s/50creates", goal{}, ""},
	{"the server's ceiling: no-op activity executions/s", ceiling, "activity-executions/s", goal{}, ""},
	{"the server's ceiling: the cores it kept busy", ceiling, "server-cores", goal{}, ""},
	{"10,000 idle proxies under care: history events per proxy and hour", care, "events/proxy-hour@10000", atMost(5), ""},
	{"10,000 idle proxies under care: workflow tasks per proxy and hour", care, "workflow-tasks/proxy-hour@10000", atMost(1), ""},
	{"10,000 idle proxies under care: Proxmox calls per proxy and hour", care, "proxmox-calls/proxy-hour@10000", atMost(0.1), ""},
	{"10,000 idle proxies under care: history events per second against the server's ceiling measured in the same run", care, "x-ceiling-events@10000", atMost(0.05), ""},
	{"idle proxies, each checking itself every interval (no observer): history events per proxy and hour", care, "events/proxy-hour-without-observer", goal{}, ""},
	{"idle proxies, each checking itself every interval (no observer): Proxmox calls per proxy and hour", care, "proxmox-calls/proxy-hour-without-observer", goal{}, ""},
	{"a create behind a backlog of checks at the call cap, against the same create with none", backlog, "x-alone", atMost(1.2), ""},
	{"the same with every call of one priority, first come, first served", backlog, "x-alone-flat", goal{}, ""},
	{"10,000 idle entities: RSS of the worker's process, projected from 1,000 (with the simulator and the client), GB", memory, "GB-rss@10000", atMost(1), ""},
	{"the same: memory per entity of the second 500 against the first (1: it grows linearly)", memory, "x-linear", goal{}, ""},
	{"after a worker outage of 5 intervals: every proxy listed again, intervals after the restart", outage, "intervals-to-list", atMost(2), ""},
	{"the same: the VMs stopped by hand meanwhile run again, intervals after the restart", outage, "intervals-to-heal", goal{}, ""},
	{"the same: a create sent at the restart, against the same create on the idle system", outage, "x-idle", atMost(1.2), ""},
	{"30 creates onto 2 clone slots, both workers killed every 5 to 20 s: share of the time the slots run a clone while creates queue", slots, "busy-share", atLeast(0.8), ""},
	{"the same: a slot free between one clone's end and the next's start, p50, seconds", slots, "s/turn-p50", goal{}, ""},
	{"as shipped (the binaries, the simulator over REST, every default), 100 proxies at once with a small host's 4 s clones: wall time against the clone limit's floor", shipped, "x-floor", atMost(1.25), ""},
	{"the same: share of the time the clone slots run a clone while creates queue (the slots, not the call cap, bound the fleet)", shipped, "busy-share", atLeast(0.8), ""},
	{"the same: Proxmox requests a second against the call cap's rate", shipped, "x-cap-rate", goal{}, ""},
	{"the same: Proxmox requests per proxy", shipped, "requests/proxy", goal{}, ""},
	{"the same: the first clone's start after the requests, seconds", shipped, "s/first-clone", goal{}, ""},
}

func main() {
	results, err := read(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	if !printTable(os.Stdout, results) {
		os.Exit(1)
	}
}

// read passes in through to out (echo) and returns the values of its results, by benchmark name
// and unit. A benchmark run several times keeps its last value.
func read(in io.Reader, out io.Writer) (map[string]map[string]float64, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(echo(in, out, pw)) }()
	results := map[string]map[string]float64{}
	r := benchfmt.NewReader(pr, "stdin")
	for r.Scan() {
		res, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		name := nameOf(res.Name)
		if results[name] == nil {
			results[name] = map[string]float64{}
		}
		for _, v := range res.Values {
			results[name][v.Unit] = v.Value
		}
	}
	return results, r.Err()
}

// echo copies in to all, and to out but for what the packages without benchmarks print
// (`? pkg [no test files]`, and `PASS` and `ok pkg` with no benchmark of pkg before them), so
// that the benchmarks' output is what shows before the table. A failure shows whatever its
// package.
func echo(in io.Reader, out, all io.Writer) error {
	lines := bufio.NewScanner(in)
	lines.Buffer(nil, 1<<20)
	benchmarked := "" // the package whose benchmarks print, from its "pkg:" line
	passed := false   // a PASS held until its package's ok line says whose it is
	for lines.Scan() {
		line := lines.Text()
		if _, err := fmt.Fprintln(all, line); err != nil {
			return err
		}
		switch fields := strings.Fields(line); {
		case strings.HasPrefix(line, "?") && strings.HasSuffix(line, "[no test files]"):
			continue
		case line == "PASS":
			passed = true
			continue
		case len(fields) > 1 && fields[0] == "ok" && fields[1] != benchmarked:
			passed = false
			continue
		case len(fields) > 1 && fields[0] == "pkg:":
			benchmarked = fields[1]
		}
		if passed {
			fmt.Fprintln(out, "PASS")
			passed = false
		}
		fmt.Fprintln(out, line)
	}
	return lines.Err()
}

// nameOf is a benchmark's full name without its GOMAXPROCS suffix.
func nameOf(n benchfmt.Name) string {
	base, parts := n.Parts()
	var b bytes.Buffer
	b.Write(base)
	for _, p := range parts {
		if !bytes.HasPrefix(p, []byte("-")) {
			b.Write(p)
		}
	}
	return b.String()
}

// printTable prints the figures and reports whether every goal held.
func printTable(out io.Writer, results map[string]map[string]float64) bool {
	held, goals, explained, missing := 0, 0, 0, 0
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nfigure\tmeasured\tgoal\t")
	for _, f := range figures {
		got := results[f.benchmark]
		v, ran := got[f.unit]
		measured, verdict := format(v), ""
		if lo, ok := got[f.unit+"-min"]; ok {
			measured += fmt.Sprintf(" (%s-%s)", format(lo), format(got[f.unit+"-max"]))
		}
		switch {
		case !ran:
			measured, verdict = "not run", "missing"
			missing++
		case !f.goal.set:
		case f.goal.heldBy(v):
			verdict = "holds"
		case f.missedBecause != "":
			verdict = "missed, counted as issue 32 asks: " + f.missedBecause
			explained++
		default:
			verdict = "MISSED"
		}
		if f.goal.set {
			goals++
			if verdict == "holds" {
				held++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.what, measured, f.goal, verdict)
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "%d of %d goals held", held, goals)
	if explained > 0 {
		fmt.Fprintf(out, "; %d of issue 21's, counted the corrected way, missed for the reason its row gives", explained)
	}
	if missing > 0 {
		fmt.Fprintf(out, "; %d figures not run", missing)
	}
	fmt.Fprintln(out)
	return held+explained == goals && missing == 0
}

// format prints a figure as the table in the docs does: whole numbers whole, ratios with two
// decimals, larger figures with three digits or more.
func format(v float64) string {
	switch a := math.Abs(v); {
	case v == math.Trunc(v) || a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}
