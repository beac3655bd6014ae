package proxy

// State is what a proxy VM is doing, as an operator sees it.
type State string

const (
	// Running means the VM runs and its guest agent reports a routable address: an IPv4, or an
	// IPv6 for an IPv6-only proxy.
	Running State = "Running"
	// Provisioning means the VM runs but has no routable address yet.
	Provisioning State = "Provisioning"
	// Stopped means the VM does not run guest code: stopped, paused or otherwise halted.
	Stopped State = "Stopped"
	// Unknown means PVE does not know: the VM's node is down, or the status cache has not
	// seen a fresh clone yet.
	Unknown State = "Unknown"
)

// MapState maps PVE's status ("running", "stopped", or "unknown" in cluster resources) and
// QEMU's qmpstatus (empty when only cluster resources were read) to a State. A VM that is
// running but paused or otherwise halted by QEMU forwards no traffic, so it counts as Stopped.
func MapState(status, qmpstatus string, hasIPv4 bool) State {
	switch {
	case status == "unknown":
		return Unknown
	case status == "running" && (qmpstatus == "" || qmpstatus == "running"):
		if hasIPv4 {
			return Running
		}
		return Provisioning
	default:
		return Stopped
	}
}
