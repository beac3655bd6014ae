package pvesim

import (
	"errors"

	"github.com/pveflow/pveflow/internal/pve"
)

// ErrAnswerHeld is an injected failure of a call that took effect: the REST server holds its
// answer until the client gives up waiting, then drops the connection, as a pveproxy whose
// pvedaemon is stuck does. Callers of the model itself see it as an ordinary error, the effect
// done.
var ErrAnswerHeld = errors.New("pvesim: answer held past the client's timeout")

// A chaosFault is one way a random fault (Options.FaultRate) fails a call, the way PVE fails.
type chaosFault int

const (
	// chaosServerError is pvedaemon's 500 for passing trouble; the call did nothing.
	chaosServerError chaosFault = iota
	// chaosRefused is pveproxy's 595: it could not reach pvedaemon; the call did nothing.
	chaosRefused
	// chaosBrokenPipe is pveproxy's 596: the connection broke while the request was sent; the
	// call did nothing.
	chaosBrokenPipe
	// chaosLock is a lock that was not free: a mutating call naming a VM is refused at once
	// (its config's lock property, or its config flock not taken within 10 s), or the task it
	// starts ends with the lock error and without its effect, whichever PVE does for that call.
	// Calls that take no lock fail as chaosServerError instead.
	chaosLock
	// chaosProxyTimeout is pveproxy's 596 after its 30 s: pvedaemon ran the call, the answer
	// never came back.
	chaosProxyTimeout
	// chaosLost is an answer lost after the call took effect: the connection is dropped.
	chaosLost
	// chaosHeld is an answer held after the call took effect until the client times out.
	chaosHeld
	chaosKinds
)

// chaosLockedBy is what holds the config's lock in a random lock fault: a backup job, the most
// common holder a proxy's VM meets on a real cluster.
const chaosLockedBy = "backup"

// syncLockMethods are refused at once on a lock: PVE's early check_lock (config writes, clone)
// or the config flock (config writes). taskLockMethods check the lock in their worker, so their
// task fails with it.
var (
	syncLockMethods = map[string]bool{"SetVMConfig": true, "Clone": true}
	taskLockMethods = map[string]bool{"Start": true, "Stop": true, "Reboot": true, "Destroy": true, "Resize": true}
)

// drawChaos draws whether a call meets a random fault, and which. The caller holds the
// lock.
func (c *Cluster) drawChaos() (chaosFault, bool) {
	if c.faultRate == 0 || c.rng.Float64() >= c.faultRate {
		return 0, false
	}
	f := chaosFault(c.rng.IntN(int(chaosKinds)))
	c.faults.chaos[f]++
	return f, true
}

// chaosBefore is the error of a random fault that keeps the call from taking effect, nil for
// one that comes after it (or none). A lock fault on a call that starts a task sets the exit
// its task gets, in c.faults.taskLock. The caller holds the lock.
func (c *Cluster) chaosBefore(f chaosFault, rec Call) error {
	switch f {
	case chaosServerError:
		return serverErr(transientText)
	case chaosRefused:
		return proxyErr(595, "Connection refused")
	case chaosBrokenPipe:
		return proxyErr(596, "Broken pipe")
	case chaosLock:
		lockText := lockedText(chaosLockedBy)
		if c.rng.IntN(2) == 0 {
			lockText = flockText(rec.VMID)
		}
		switch {
		case rec.VMID == 0:
		case syncLockMethods[rec.Method]:
			return serverErr(lockText)
		case taskLockMethods[rec.Method]:
			c.faults.taskLock = lockText
			return nil
		}
		return serverErr(transientText)
	}
	return nil
}

// chaosAfter is the error that replaces the answer of a call that took effect, for the faults
// that come after the effect.
func chaosAfter(f chaosFault) error {
	switch f {
	case chaosProxyTimeout:
		return proxyErr(596, "Connection timed out")
	case chaosLost:
		return ErrDropConnection
	case chaosHeld:
		return ErrAnswerHeld
	}
	return nil
}

// proxyErr is one of AnyEvent::HTTP's statuses that pveproxy relays with its reason and an
// empty body (testdata/pve/err_proxy_*.json).
func proxyErr(status int, reason string) *pve.APIError {
	return &pve.APIError{Status: status, Reason: reason}
}

// chaosNames name the faults in State.Faults.
var chaosNames = [chaosKinds]string{
	chaosServerError:  "500 got no worker upid",
	chaosRefused:      "595 Connection refused",
	chaosBrokenPipe:   "596 Broken pipe",
	chaosLock:         "lock error",
	chaosProxyTimeout: "596 Connection timed out, after the effect",
	chaosLost:         "connection dropped, after the effect",
	chaosHeld:         "answer held past the client's timeout, after the effect",
}
