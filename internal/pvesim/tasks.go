package pvesim

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// task is a PVE worker. Its effects are events scheduled for its end. Most tasks know their
// outcome and end when they start; a clone learns them as it goes, when it waits for a flock or
// a storage's lock, and its end is zero until then.
type task struct {
	upid  pve.UPID
	info  pve.UPIDInfo
	start time.Time
	// seen is when a TaskStatus call first found the task stopped; zero until one did.
	seen time.Time
	// end is when the task stops; zero for a task that runs forever or whose end is not known
	// yet. It is known by the time it comes: the event that decides it is never later.
	end  time.Time
	exit string
	// log are the lines the worker logs before its last one, which its exit status gives.
	log []string
	// ended are the effects waiting for an end that is not known yet.
	ended []func()
}

func (t *task) done(now time.Time) bool { return !t.end.IsZero() && !now.Before(t.end) }

// succeeded reports whether an exit status is PVE's success: OK or WARNINGS: N.
func succeeded(exit string) bool {
	_, err := pve.TaskStatus{ExitStatus: exit}.Result()
	return err == nil
}

// startTask starts a task of type typ on node about id that ends after the type's duration
// with exit. A task that would succeed meets a FailTask fault queued for its type first.
func (c *Cluster) startTask(now time.Time, node, typ, id, exit string) *task {
	exit = c.taskExit(typ, exit)
	c.pid++
	info := pve.UPIDInfo{
		Node:      node,
		PID:       c.pid,
		PStart:    int64(now.Sub(c.epoch) / (10 * time.Millisecond)), // jiffies since boot
		StartTime: now.Unix(),
		Type:      typ,
		ID:        id,
		User:      c.user,
	}
	t := &task{upid: pve.UPID(info.String()), info: info, start: now, end: now.Add(c.durations[typ]), exit: exit}
	c.tasks[t.upid] = t
	return t
}

// onEnd schedules fn for the end of t, if t ends: at once if its end is known, else when
// setEnd makes it known.
func (c *Cluster) onEnd(t *task, fn func()) {
	if t.end.IsZero() {
		t.ended = append(t.ended, fn)
		return
	}
	c.at(t.end, fn)
}

// setEnd decides that t stops at end and schedules what waited for it, in the order it waited.
func (c *Cluster) setEnd(t *task, end time.Time) {
	t.end = end
	for _, fn := range t.ended {
		c.at(end, fn)
	}
	t.ended = nil
}

// TaskStatus reads a task's status on the node that runs it. A task exists only on its own
// node: PVE looks for the task's log file there.
func (c *Cluster) TaskStatus(ctx context.Context, node string, upid pve.UPID) (pve.TaskStatus, error) {
	return call(c, ctx, Call{Method: "TaskStatus", Node: node}, func(now time.Time) (pve.TaskStatus, error) {
		t, err := c.taskOn(node, upid)
		if err != nil {
			return pve.TaskStatus{}, err
		}
		// Tasks of API tokens list the token apart from its user.
		user, token, _ := strings.Cut(t.info.User, "!")
		st := pve.TaskStatus{
			UPID:      upid,
			Node:      t.info.Node,
			PID:       t.info.PID,
			PStart:    t.info.PStart,
			StartTime: t.info.StartTime,
			Type:      t.info.Type,
			ID:        t.info.ID,
			User:      user,
			TokenID:   token,
			Status:    pve.TaskRunning,
		}
		if t.done(now) {
			st.Status, st.ExitStatus = pve.TaskStopped, t.exit
			if t.seen.IsZero() {
				t.seen = now
			}
		}
		return st, nil
	})
}

// TaskRun is a task as the cluster ran it and was asked about it.
type TaskRun struct {
	UPID pve.UPID
	// Type is the task's type, such as "qmclone".
	Type string
	// Start is when the task started, End when it stopped: zero while it runs.
	Start, End time.Time
	// Seen is when a TaskStatus call first found the task stopped (a fault may yet have lost
	// that answer); zero until one did.
	Seen time.Time
}

// TaskRuns lists every task, in the order they started.
func (c *Cluster) TaskRuns() []TaskRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.advance(now)
	tasks := c.tasksInOrder()
	out := make([]TaskRun, 0, len(tasks))
	for _, t := range tasks {
		run := TaskRun{UPID: t.upid, Type: t.info.Type, Start: t.start, Seen: t.seen}
		if t.done(now) {
			run.End = t.end
		}
		out = append(out, run)
	}
	return out
}

// tasksInOrder is every task, in the order they started. The caller holds c.mu.
func (c *Cluster) tasksInOrder() []*task {
	return slices.SortedFunc(maps.Values(c.tasks), func(a, b *task) int { return cmp.Compare(a.info.PID, b.info.PID) })
}

// taskOn is task upid, which exists only on its own node: PVE looks for the task's log file
// there.
func (c *Cluster) taskOn(node string, upid pve.UPID) (*task, error) {
	if _, err := c.nodeNamed(node); err != nil {
		return nil, err
	}
	if _, err := pve.ParseUPID(upid); err != nil {
		return nil, paramErr(map[string]string{"upid": "unable to parse worker upid"})
	}
	t := c.tasks[upid]
	if t == nil || t.info.Node != node {
		return nil, paramErr(map[string]string{"upid": "no such task"})
	}
	return t, nil
}

// TaskDuration is how long a task of type typ runs on the cluster (Options.TaskDurations, or the
// default): with AgentBootDelay, what a benchmark's floor is made of.
func (c *Cluster) TaskDuration(typ string) time.Duration {
	mustTaskType(typ)
	return c.durations[typ]
}

// AgentBootDelay is how long a started VM runs before its guest agent answers
// (Options.AgentBootDelay).
func (c *Cluster) AgentBootDelay() time.Duration { return c.bootDelay }

// Pace is the cluster's task durations and its guests' boot delay.
func (c *Cluster) Pace() Pace {
	return Pace{TaskDurations: maps.Clone(c.durations), AgentBootDelay: c.bootDelay}
}

// NodeTasks lists the node's tasks as GET /nodes/{node}/tasks does (pve-manager
// PVE/API2/Tasks.pm node_tasks): newest first, the finished ones ("archive", PVE's default
// source), the running ones ("active") or both ("all"), of one type and one VMID (a task's
// ID) when p says, at most p.Limit (50 by default). Every task of the model is the token's
// own, which PVE always lists; others' need Sys.Audit on /nodes/{node}.
func (c *Cluster) NodeTasks(ctx context.Context, node string, p pve.TaskListParams) ([]pve.TaskListEntry, error) {
	return call(c, ctx, Call{Method: "NodeTasks", Node: node, VMID: p.VMID}, func(now time.Time) ([]pve.TaskListEntry, error) {
		if _, err := c.nodeNamed(node); err != nil {
			return nil, err
		}
		switch p.Source {
		case "", "archive", "active", "all":
		default:
			return nil, paramErr(map[string]string{"source": "value '" + p.Source + "' does not have a value in the enumeration 'archive, active, all'"})
		}
		limit := p.Limit
		if limit == 0 {
			limit = 50
		}
		tasks := slices.SortedFunc(maps.Values(c.tasks), func(a, b *task) int {
			return cmp.Or(b.start.Compare(a.start), cmp.Compare(b.info.PID, a.info.PID))
		})
		out := []pve.TaskListEntry{}
		for _, t := range tasks {
			done := t.done(now)
			switch {
			case t.info.Node != node,
				p.TypeFilter != "" && t.info.Type != p.TypeFilter,
				p.VMID != 0 && t.info.ID != strconv.Itoa(p.VMID),
				(p.Source == "" || p.Source == "archive") && !done,
				p.Source == "active" && done,
				t.info.User != c.user && c.allow("/nodes/"+node, "Sys.Audit") != nil:
				continue
			}
			e := pve.TaskListEntry{UPID: t.upid, Node: node, Type: t.info.Type, ID: t.info.ID, User: t.info.User, StartTime: t.info.StartTime}
			if done {
				e.EndTime, e.Status = t.end.Unix(), t.exit
			}
			if out = append(out, e); len(out) == limit {
				break
			}
		}
		return out, nil
	})
}
