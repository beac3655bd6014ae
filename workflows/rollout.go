package workflows

// RolloutInput is the input of Rollout: change the proxies UIDs names, MaxUnavailable at a time.
type RolloutInput struct {
	UIDs []string `json:"uids"`
	// Image and MachineType are the change; empty leaves that part of a proxy as it is.
	Image       string `json:"image,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	// MaxUnavailable is how many proxies may be changing (and so without their IPv4) at once.
	MaxUnavailable int `json:"maxUnavailable"`
	// Selector is how the UIDs were chosen, for the status and the UI; Rollout does not read it.
	Selector string `json:"selector,omitempty"`
}
