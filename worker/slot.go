package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A worker's slot on its host. The call cap is shared by the workers of a task queue through
// leases (callshares.CallShares): a worker that is killed tells nobody, and its share stays
// counted until its lease runs out, ten seconds in which the others cannot use it. A worker
// started in its place would wait that long for its own, and one killed over and over (a crash
// loop, an OOM kill) would starve the ones that live. So each worker holds a slot: a file in
// which it writes its identity and, as they change, its calls in flight, under an exclusive
// flock. The kernel drops the lock when the
// process exits, however it exits, so the next worker of that task queue started on the host
// takes the first free slot, reads there whom it replaces, and says so in its first renewal
// (starter.CallShare.Replaces), which ends the predecessor's lease at once; the calls the
// predecessor had in flight when it died, which the file shows, count until they can have
// ended. Two live workers never hold one slot, so a worker never ends the lease of one that
// runs.

// maxSlots bounds the workers of one task queue on one host.
const maxSlots = 64

// slot is a worker's slot, held while the process runs.
type slot struct {
	f *os.File
	// at is where the calls in flight are written, after the identity's line.
	at int64
}

// predecessor is what a slot says of the worker that held it before.
type predecessor struct {
	identity string
	// calls is how many calls it had in flight when it died; nil when the slot does not say.
	calls *int
}

// callsWidth is the width the calls in flight are written in, so that each write overwrites
// the last.
const callsWidth = 8

// claimSlot takes the first free slot of taskQueue's workers in dir, writes identity in it and
// returns it, and what it says of the worker that held it before: zero if none did.
func claimSlot(dir, taskQueue, identity string) (*slot, predecessor, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, predecessor{}, fmt.Errorf("worker slot: %w", err)
	}
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r < ' ' {
			return '_'
		}
		return r
	}, taskQueue)
	for i := range maxSlots {
		path := filepath.Join(dir, fmt.Sprintf("%s.%d.slot", name, i))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, predecessor{}, fmt.Errorf("worker slot: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // a live worker holds it
			}
			return nil, predecessor{}, fmt.Errorf("worker slot %s: lock: %w", path, err)
		}
		before, err := io.ReadAll(f)
		s := &slot{f: f, at: int64(len(identity) + 1)}
		if err == nil {
			err = f.Truncate(0)
		}
		if err == nil {
			_, err = f.WriteAt([]byte(identity+"\n"), 0)
		}
		if err == nil {
			err = s.write(0)
		}
		if err != nil {
			f.Close()
			return nil, predecessor{}, fmt.Errorf("worker slot %s: %w", path, err)
		}
		return s, parsePredecessor(string(before)), nil
	}
	return nil, predecessor{}, fmt.Errorf("worker slot: all %d slots of task queue %s in %s are held by live workers", maxSlots, taskQueue, dir)
}

// parsePredecessor reads a slot's text: the identity's line, then the calls in flight.
func parsePredecessor(text string) predecessor {
	identity, rest, _ := strings.Cut(text, "\n")
	p := predecessor{identity: identity}
	if n, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil && n >= 0 {
		p.calls = &n
	}
	return p
}

// write records calls, the worker's calls in flight. A write to a file of a few bytes that
// exists fails only on a broken disk; the slot then says an earlier count, and a successor
// counts that.
func (s *slot) write(calls int) error {
	_, err := s.f.WriteAt(fmt.Appendf(nil, "%-*d\n", callsWidth, calls), s.at)
	return err
}

// recordCalls is write for pve.Client.TellCallsInFlight, which has no use for its error.
func (s *slot) recordCalls(calls int) { _ = s.write(calls) }

// Name is the slot's file.
func (s *slot) Name() string { return s.f.Name() }

// Close gives the slot up.
func (s *slot) Close() error { return s.f.Close() }

// slotDir is where the worker slots are: $XDG_RUNTIME_DIR/pveflow, or pveflow-<uid> in the
// temporary directory. Either is the user's own, so another user's workers never share a slot.
func slotDir(getenv func(string) string) string {
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "pveflow")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("pveflow-%d", os.Getuid()))
}
