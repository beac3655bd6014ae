package chaos

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/starter"
)

// slots is the clone slots' benchmark: thirty creates at once onto one storage with two clone
// slots, clones of a small real host's 4 s, no Proxmox faults: only the worker kills.
var slots = scenario{workers: 2, proxies: 30, faultRate: 0, taskScale: 1}

// BenchmarkChaos_cloneSlotsBusyUnderWorkerKills measures how much of the time a storage's clone
// slots run a clone while creates queue for them, with both workers SIGKILLed every 5 to 20 s
// and started again at once, as in the chaos runs. All the creates are sent at once, so from
// the first clone's start to the last's some create queues: the share is the clone time in
// that window over the slots' time in it. A slot is free from a clone's end until the admission
// has heard that the lease is back and the next create has started its clone; a kill that
// lands on a create or on the admission between the two stretches that. The goal is
// ≥ 0.8.
func BenchmarkChaos_cloneSlotsBusyUnderWorkerKills(b *testing.B) {
	for range b.N {
		r := newRun(b, slots, 31, false)
		for _, w := range r.workers {
			r.killsDone.Add(1)
			go r.killLoop(w)
		}
		began := time.Now()
		var creates sync.WaitGroup
		for i := range slots.proxies {
			uid := fmt.Sprintf("slots-%03d", i)
			creates.Go(func() {
				if !r.ask(uid, starter.Create, uid+"-create", createInput(uid, false)) {
					r.fail("create %s did not succeed", uid)
				}
			})
		}
		creates.Wait()
		took := time.Since(began)
		r.stopChaos()
		st := r.simState()
		if most := st.MaxConcurrentClones["pve1/local-lvm"]; most > perStorage {
			b.Fatalf("%d clones ran at once onto two slots: %s", most, peak(st.Clones, "pve1/local-lvm"))
		}
		use := slotUse(st.Clones, perStorage)
		b.ReportMetric(use.busy, "busy-share")
		b.ReportMetric(use.turnP50.Seconds(), "s/turn-p50")
		b.ReportMetric(use.turnMax.Seconds(), "s/turn-max")
		b.ReportMetric(use.lateP50.Seconds(), "s/end-seen-late-p50")
		b.ReportMetric(float64(r.workerKills), "worker-kills")
		b.ReportMetric(took.Seconds(), "s/creates")
		b.Logf("%d creates in %s under %d worker kills: slots busy %.2f of the time while creates queued; a slot's turn p50 %s, longest %s; a clone's end seen %s late (p50); %d clone tasks",
			slots.proxies, took.Round(time.Millisecond), r.workerKills, use.busy, use.turnP50, use.turnMax, use.lateP50, use.clones)
		r.mustNotHaveFailed()
	}
}

// slotUsage is how a storage's clone slots were used while creates queued for them.
type slotUsage struct {
	// busy is the clone time from the first clone's start to the last's, over the slots' time
	// in that window.
	busy float64
	// turnP50 and turnMax are how long a slot stayed free between one clone's end and the next
	// clone's start.
	turnP50, turnMax time.Duration
	// lateP50 is how long after a clone's end its wait saw it end, the median: the part of a
	// turn the looks' pace makes.
	lateP50 time.Duration
	clones  int
}

// slotUse measures runs, the clone tasks onto one storage with n slots, every one of them
// started while others queued. The k-th clone to start took the slot of the (k−n)-th to end.
func slotUse(runs []pvesim.CloneRun, n int) slotUsage {
	var starts, ends []time.Time
	var late []time.Duration
	for _, c := range runs {
		if !c.End.IsZero() {
			starts, ends = append(starts, c.Start), append(ends, c.End)
		}
		if !c.Seen.IsZero() {
			late = append(late, c.Seen.Sub(c.End))
		}
	}
	if len(starts) <= n {
		return slotUsage{clones: len(starts)}
	}
	slices.SortFunc(starts, time.Time.Compare)
	slices.SortFunc(ends, time.Time.Compare)
	first, last := starts[0], starts[len(starts)-1]
	var busy time.Duration
	for _, c := range runs {
		if c.End.IsZero() {
			continue
		}
		from, to := c.Start, c.End
		if from.Before(first) {
			from = first
		}
		if to.After(last) {
			to = last
		}
		if to.After(from) {
			busy += to.Sub(from)
		}
	}
	var turns []time.Duration
	for k := n; k < len(starts); k++ {
		turns = append(turns, starts[k].Sub(ends[k-n]))
	}
	slices.Sort(turns)
	slices.Sort(late)
	use := slotUsage{busy: busy.Seconds() / (float64(n) * last.Sub(first).Seconds()), turnP50: turns[len(turns)/2], turnMax: turns[len(turns)-1], clones: len(starts)}
	if len(late) > 0 {
		use.lateP50 = late[len(late)/2]
	}
	return use
}

func TestSlotUse_countsTheCloneTimeBetweenTheFirstStartAndTheLastOverTheSlots(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(0, 0).Add(time.Duration(s * float64(time.Second))) }
	clone := func(start, end float64) pvesim.CloneRun {
		return pvesim.CloneRun{Start: at(start), End: at(end), Seen: at(end + 0.1*start)}
	}
	// Two slots over 0-6 s: 0-4 and 1-5 s, then the slot freed at 4 s takes the next clone at 5 s
	// and the one freed at 5 s at 6 s. In the window, 4+4+1 of the slots' 12 seconds ran a clone.
	use := slotUse([]pvesim.CloneRun{clone(0, 4), clone(1, 5), clone(5, 9), clone(6, 10)}, 2)
	assert.InDelta(t, 9.0/12, use.busy, 1e-9)
	assert.Equal(t, time.Second, use.turnP50)
	assert.Equal(t, time.Second, use.turnMax)
	assert.Equal(t, 500*time.Millisecond, use.lateP50) // seen 0, 0.1, 0.5 and 0.6 s late
	assert.Equal(t, 4, use.clones)
}
