package admission

import (
	"time"
)

// The priorities of the workflows' tasks in their task queue (Temporal's PriorityKey: 1 goes
// first, 3 is the default and the entities'), which their activities inherit. A storage's clone
// admission goes first: each of its workflow tasks hands a clone slot on. The operations go
// before the entities, so that when a fleet of proxies is asked for at once the first creates
// ask for their clone slots while the rest of the entities are still starting: in FIFO order
// three hundred entities started before the first create's lease request, and the first slots
// stood free for seconds.
const (
	admissionPriority = 1
)

// The workflow task timeouts of the workflows a clone slot's turn runs through: how long
// Temporal waits for a worker that took one of their workflow tasks before it gives the task to
// another. A worker that dies with the task (killed, out of memory) tells nothing, and for that
// long the slot the task hands on stays free: the admission's task that grants it, the granted
// create's that starts its clone. Under worker kills the default, 10 s, was the longest a slot
// stood free. The SDK keeps a task that waits on its local activities alive past 0.8 of its
// timeout by a heartbeat, which writes three events. The admission's tasks take milliseconds.
// An operation's may make three waits' first looks in a row (a create's seed upload, resize and
// start: poll's youngLooks), about 3 s at the simulator's pace: at 2 s every create and delete
// wrote a heartbeat, and 5 s keeps them within one task. Continue-as-new keeps them.
const (
	admissionTaskTimeout = 2 * time.Second
)
