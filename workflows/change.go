package workflows

// ChangeProxyInput is the input of ChangeProxy: the whole spec the proxy's VM is to match, as
// its Proxy entity holds it. ChangeProxy never rebuilds: a new image or zone is a delete and a
// create, which the entity runs.
type ChangeProxyInput struct {
	UID  string `json:"uid"`
	Name string `json:"name"`
	// Zone and Image are the proxy's, to resolve MachineType's placement with.
	Zone        string `json:"zone,omitempty"`
	Image       string `json:"image"`
	MachineType string `json:"machineType"`
	// Reseed makes ChangeProxy write a new seed ISO with UserData and InstanceID and reboot the
	// guest, so cloud-init runs the new user-data.
	Reseed bool `json:"reseed,omitempty"`
	// UserData is read from here by UploadISO, as CreateProxy's is (see CreateProxyInput).
	UserData   string `json:"userData,omitempty"`
	InstanceID string `json:"instanceID,omitempty"`
}

// ChangeProxyResult is what ChangeProxy returns, and what the entity's change Update answers.
type ChangeProxyResult struct {
	VMID int    `json:"vmid"`
	Node string `json:"node"`
	Name string `json:"name"`
	// Changed says what changed, one entry each, such as "cores 2 -> 4"; empty when the VM
	// already matched.
	Changed []string `json:"changed"`
	// Restarted reports whether the guest was rebooted or started to apply the change.
	Restarted bool `json:"restarted"`
	// Rebuilt reports that the VM was destroyed and created again (a new image or zone).
	Rebuilt bool   `json:"rebuilt,omitempty"`
	IPv4    string `json:"ipv4"`
}
