package proxyvm

import (
	"errors"
	"fmt"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
)

// ProxySpec is a proxy's spec: what its VM is to be. It is the argument of the entity's create
// Update, what the entity holds, and the input of the CreateProxy and ChangeProxy it starts
// (ChangeProxy never rebuilds: a new image or zone is a delete and a create, which the entity
// runs). Check and CheckFor are its one validation, whichever layer asks: the CLI and the
// starter before they send it, the entity's validator, and the operations before their first
// step.
type ProxySpec struct {
	UID string `json:"uid"`
	// Name is the VM's name, and the guest's hostname; empty means proxy.NameFromUID(UID).
	// Otherwise proxy.ValidateName says which names it may be: one that every step carries,
	// the seed's hostname and the provider ID among them.
	Name string `json:"name,omitempty"`
	// Zone is the node; it may be empty when the config names one node.
	Zone string `json:"zone,omitempty"`
	// Image is a key of the config's templates.
	Image string `json:"image"`
	// MachineType is a key of the config's machine types.
	MachineType string `json:"machineType"`
	// Region is accepted and ignored: a Proxmox cluster has no regions.
	Region string `json:"region,omitempty"`
	// UserData is the cloud-init user-data, at most MaxUserDataBytes. It may hold secrets: it
	// goes onto the seed ISO and nowhere else pveflow writes (logs, errors, search attributes,
	// results). Temporal's history holds it as payloads (the entity's request, this input, and
	// UploadISO's when it ran as an activity), which a codec (PVEFLOW_CODEC_KEY_FILE) encrypts.
	UserData string `json:"userData,omitempty"`
	// InstanceID is cloud-init's instance-id on the seed ISO; empty means the UID. The proxy's
	// entity gives a new one with each new user-data, so cloud-init runs it again.
	InstanceID string `json:"instanceID,omitempty"`
	// Addresses are net0's static addresses; empty takes DHCP's IPv4. They are written into
	// the seed's network-config, and a create or change waits until the guest reports each.
	Addresses proxy.Addresses `json:"addresses,omitzero"`
	// NICs are the VM's NICs (config.NIC: net0 first, further ones added), in place of its
	// machine type's; empty takes the machine type's.
	NICs []config.NIC `json:"nics,omitempty"`
	// AddressPool names a configured address pool that gives net0's addresses, allocated per
	// UID and freed when the proxy is deleted; empty allocates none. It excludes Addresses.
	AddressPool string `json:"addressPool,omitempty"`
}

// MaxUserDataBytes is the most cloud-init user-data, in bytes, a spec or a change takes: 64
// KiB. The CLI and the starter refuse more before they send anything, and the operations fail
// Permanent on more before their first step, where Temporal would otherwise refuse the start or
// a later command with a blob-size error.
//
// The user-data is stored in the workflow's input, a payload Temporal refuses over 2 MB and
// warns about over 512 KB (its default blob-size limits). JSON writes a byte as at most six
// (\u003c for '<', \u00XX for a control character, \ufffd for a byte that is not UTF-8), so
// 64 KiB of user-data makes at most 384 KiB of payload: under the warning, whatever it holds.
// It is also what clouds allow (EC2 takes 16 KB, Azure 64 KB): user-data is configuration, and
// anything larger belongs in a file the guest fetches.
const MaxUserDataBytes = 64 << 10

// ChangeRequest is the argument of the change Update: what to change in a present proxy. An
// empty field leaves that part as it is.
type ChangeRequest struct {
	UID         string `json:"uid"`
	Image       string `json:"image,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	// UserData, when set, replaces the user-data: a new seed ISO with a new instance-id, and a
	// reboot, so cloud-init runs it. It may hold secrets, as ProxySpec.UserData may.
	UserData *string `json:"userData,omitempty"`
}

// What errors.Is finds in a SpecError: which part of a spec or a change was refused.
var (
	// ErrInvalidUID: the UID is not a Proxy UID (proxy.ValidateUID).
	ErrInvalidUID = errors.New("invalid proxy UID")
	// ErrInvalidName: the name is not a DNS label (proxy.ValidateName).
	ErrInvalidName = errors.New("invalid proxy name")
	// ErrInvalidNetwork: static addresses proxy.Addresses.Validate refuses, NICs
	// config.ValidateNICs refuses, an address pool beside static addresses, or a static address
	// inside a pool's range.
	ErrInvalidNetwork = errors.New("invalid proxy network")
	// ErrUserDataTooLarge: user-data over MaxUserDataBytes. The message gives the sizes, never
	// the user-data.
	ErrUserDataTooLarge = errors.New("user-data too large")
	// ErrNothingToChange: a change that sets nothing.
	ErrNothingToChange = errors.New("nothing to change")
	// ErrNotConfigured: a zone, image, machine type or address pool the worker's configuration
	// does not have, or a placement it cannot serve.
	ErrNotConfigured = errors.New("not in the configuration")
)

// SpecError is a spec or a change refused before anything was sent or made. Its message is
// the same whichever layer refused it: "<op> proxy <uid>: <what is wrong>".
type SpecError struct {
	// Op is "create" or "change".
	Op  string
	UID string
	// Kind is one of the Err variables above.
	Kind error
	Err  error
}

func (e *SpecError) Error() string {
	if errors.Is(e.Kind, ErrInvalidUID) {
		return fmt.Sprintf("%s proxy: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s proxy %s: %v", e.Op, e.UID, e.Err)
}

func (e *SpecError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Check refuses a spec no configuration could serve: an invalid UID or name, invalid static
// addresses or NICs, an address pool beside static addresses, user-data over MaxUserDataBytes.
// It needs no configuration, so the CLI and the starter ask it before they send anything.
func (s ProxySpec) Check() error { return s.check("create") }

func (s ProxySpec) check(op string) error {
	refuse := func(kind, err error) error { return &SpecError{Op: op, UID: s.UID, Kind: kind, Err: err} }
	if err := proxy.ValidateUID(s.UID); err != nil {
		return refuse(ErrInvalidUID, err)
	}
	if s.Name != "" {
		if err := proxy.ValidateName(s.Name); err != nil {
			return refuse(ErrInvalidName, err)
		}
	}
	if err := s.Addresses.Validate(); err != nil {
		return refuse(ErrInvalidNetwork, fmt.Errorf("addresses: %w", err))
	}
	if err := config.ValidateNICs(s.NICs); err != nil {
		return refuse(ErrInvalidNetwork, err)
	}
	if s.AddressPool != "" && !s.Addresses.IsZero() {
		return refuse(ErrInvalidNetwork, fmt.Errorf("address pool %q and static addresses are both given: choose one", s.AddressPool))
	}
	if err := checkUserData(s.UserData); err != nil {
		return refuse(ErrUserDataTooLarge, err)
	}
	return nil
}

// CheckFor is Check, and refuses what cfg cannot serve: a zone, image or machine type it does
// not have or cannot place, an address pool it does not have, a static address inside a pool's
// range (the pool gives that address to whichever proxy it falls to, and only the pool's record
// says whose it is).
func (s ProxySpec) CheckFor(cfg config.Proxmox) error {
	const op = "create"
	if err := s.check(op); err != nil {
		return err
	}
	if err := s.checkPlacement(op, cfg); err != nil {
		return err
	}
	refuse := func(kind, err error) error { return &SpecError{Op: op, UID: s.UID, Kind: kind, Err: err} }
	if _, ok := cfg.AddressPools[s.AddressPool]; s.AddressPool != "" && !ok {
		return refuse(ErrNotConfigured, unknownPool(s.AddressPool, cfg.AddressPoolNames()))
	}
	for _, addr := range []string{s.Addresses.IPv4, s.Addresses.IPv6} {
		if pool := cfg.AddressPoolHolding(addr); addr != "" && pool != "" {
			return refuse(ErrInvalidNetwork, fmt.Errorf("static address %s is in the range of address pool %s, which gives its addresses to proxies itself: "+
				"give an address outside every pool's range, or the pool (--address-pool %s)", addr, pool, pool))
		}
	}
	return nil
}

// checkPlacement refuses a zone, image or machine type cfg does not have or cannot place. A
// change asks this alone of the spec it makes: the rest held when the proxy was created.
func (s ProxySpec) checkPlacement(op string, cfg config.Proxmox) error {
	if _, err := cfg.ResolvePlacement(s.Zone, s.Image, s.MachineType); err != nil {
		return &SpecError{Op: op, UID: s.UID, Kind: ErrNotConfigured, Err: err}
	}
	return nil
}

// Check refuses a change that sets nothing, or an invalid UID or user-data over
// MaxUserDataBytes. Whether the proxy can take it, the entity judges with what it holds.
func (r ChangeRequest) Check() error {
	refuse := func(kind, err error) error { return &SpecError{Op: "change", UID: r.UID, Kind: kind, Err: err} }
	if err := proxy.ValidateUID(r.UID); err != nil {
		return refuse(ErrInvalidUID, err)
	}
	if r.Image == "" && r.MachineType == "" && r.UserData == nil {
		return refuse(ErrNothingToChange, errors.New("nothing to change: give an image, a machine type or user-data"))
	}
	if r.UserData != nil {
		if err := checkUserData(*r.UserData); err != nil {
			return refuse(ErrUserDataTooLarge, err)
		}
	}
	return nil
}

func checkUserData(userData string) error {
	if len(userData) > MaxUserDataBytes {
		return fmt.Errorf("user-data is %d bytes, more than the limit of %d (proxyvm.MaxUserDataBytes)", len(userData), MaxUserDataBytes)
	}
	return nil
}

// specDiff says in words how spec b differs from a, leaving the user-data out.
func specDiff(a, b ProxySpec) []string {
	var d []string
	for _, f := range []struct{ name, a, b string }{
		{"name", a.Name, b.Name}, {"zone", a.Zone, b.Zone}, {"image", a.Image, b.Image}, {"machine type", a.MachineType, b.MachineType},
		{"addresses", a.Addresses.String(), b.Addresses.String()}, {"nics", fmt.Sprint(a.NICs), fmt.Sprint(b.NICs)},
		{"address pool", a.AddressPool, b.AddressPool},
	} {
		if f.a != f.b {
			d = append(d, fmt.Sprintf("%s %q -> %q", f.name, f.a, f.b))
		}
	}
	return d
}

func withDefaults(in ProxySpec) ProxySpec {
	if in.Name == "" {
		in.Name = proxy.NameFromUID(in.UID)
	}
	in.Region = ""
	return in
}
