package proxy

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
)

// The keys of the mark, one "key=value" line each in the VM's description. The description is
// the mark because the clone call takes it: the VM carries it from its first moment.
const (
	keyManaged   = "proxy-operator-managed"
	keyUID       = "proxy-operator-uid"
	keyCreatedAt = "proxy-operator-created-at"
	// keyInstanceID is cloud-init's instance-id of the seed the VM was last given: what
	// user-data it runs, which nothing else on Proxmox tells without reading the ISO.
	keyInstanceID = "proxy-operator-instance-id"
	// keyImage is the image the VM was cloned from: its template's VMID tells it only while the
	// catalogue keeps that template under that name.
	keyImage = "proxy-operator-image"
	// keySpec is the rest of the spec the VM was last made to, as one line of JSON (Spec): what
	// an entity that lost its state rebuilds it from.
	keySpec = "proxy-operator-spec"
	// keyOp is what the last operation that wrote the VM did, and which run it was, as one line
	// of JSON (Op): nothing else on Proxmox tells a run that is made again, or that resumes
	// another's, what was done.
	keyOp = "proxy-operator-op"
)

var markKeys = []string{keyManaged, keyUID, keyCreatedAt, keyInstanceID, keyImage, keySpec, keyOp}

// Spec is what a VM's mark records of the spec it was last made to, beside its image and
// instance-id: all of a proxy's spec that Proxmox can hold. The user-data is not among it, only
// its digest: it may hold secrets, and a description is readable with VM.Audit.
type Spec struct {
	MachineType    string       `json:"machineType,omitempty"`
	Zone           string       `json:"zone,omitempty"`
	Addresses      Addresses    `json:"addresses,omitzero"`
	AddressPool    string       `json:"addressPool,omitempty"`
	NICs           []config.NIC `json:"nics,omitempty"`
	UserDataSHA256 string       `json:"userDataSHA256,omitempty"`
}

// Op is what the last operation that wrote the VM's config did to it, and which run it was. It
// is written in the same config write as what it records, and rewritten once the reboot it owes
// ended. A local activity's effect is recorded in its workflow's history only when the workflow
// task that made it completes, so a run whose worker died first makes its calls again on the VM
// they left: it finds here what it did, and answers that, not that it found nothing to do. A run
// that resumes the change of another whose worker died finds here the reboot the change still
// owes: PVE keeps cores and memory pending on a running VM and shows them in the config as if
// they were in effect.
type Op struct {
	// Run is the run ID of the workflow that wrote it.
	Run string `json:"run"`
	// Provisioned reports that the run configured the VM from the spec, to start it: a create's.
	Provisioned bool `json:"provisioned,omitempty"`
	// Changed is what the run changed on a VM that had a spec (ChangeProxyResult.Changed).
	Changed []string `json:"changed,omitempty"`
	// Reseeded reports that the run gave the VM a new seed, which is released once the guest
	// booted from it.
	Reseeded bool `json:"reseeded,omitempty"`
	// RebootOwed reports that Changed reaches the guest only when it restarts (cores and memory,
	// NICs the guest configures as it boots, a seed cloud-init reads at boot), and that no run
	// has seen that restart end.
	RebootOwed bool `json:"rebootOwed,omitempty"`
	// Restarted reports that the run rebooted or started the guest to apply Changed.
	Restarted bool `json:"restarted,omitempty"`
}

// By reports whether run wrote o; false for a nil o.
func (o *Op) By(run string) bool { return o != nil && o.Run == run }

// OwesReboot reports whether o owes a reboot; false for a nil o.
func (o *Op) OwesReboot() bool { return o != nil && o.RebootOwed }

// Mark is what a VM's description says about the proxy it belongs to.
type Mark struct {
	UID       string
	CreatedAt time.Time
	// InstanceID and Image are empty until the VM is given its first seed: the clone call
	// writes the mark before there is one.
	InstanceID string
	Image      string
	// Spec is nil until the VM's first seed.
	Spec *Spec
	// Op is nil until an operation that records what it did wrote the VM.
	Op *Op
}

// FormatDescription is the description that marks a VM as the proxy m.UID's.
func FormatDescription(m Mark) string {
	s := keyManaged + "=true\n" +
		keyUID + "=" + m.UID + "\n" +
		keyCreatedAt + "=" + m.CreatedAt.UTC().Format(time.RFC3339)
	if m.InstanceID != "" {
		s += "\n" + keyInstanceID + "=" + m.InstanceID
	}
	if m.Image != "" {
		s += "\n" + keyImage + "=" + m.Image
	}
	if m.Spec != nil {
		// A struct of strings, ints and a bool: it cannot fail, and ranges over no map, so it is
		// deterministic in workflow code.
		spec, _ := json.Marshal(m.Spec) //workflowcheck:ignore
		s += "\n" + keySpec + "=" + string(spec)
	}
	if m.Op != nil {
		op, _ := json.Marshal(m.Op) //workflowcheck:ignore
		s += "\n" + keyOp + "=" + string(op)
	}
	return s
}

// WithMark is the description with its mark made m, and every other line as it was: people
// write notes beside the mark in the PVE UI.
func WithMark(description string, m Mark) string {
	var notes []string
	for line := range strings.Lines(description) {
		line = strings.TrimRight(line, "\r\n")
		if key, _, ok := strings.Cut(line, "="); ok && slices.Contains(markKeys, strings.TrimSpace(key)) {
			continue
		}
		notes = append(notes, line)
	}
	for len(notes) > 0 && notes[len(notes)-1] == "" {
		notes = notes[:len(notes)-1]
	}
	return strings.Join(append(notes, FormatDescription(m)), "\n")
}

// ParseDescription reads the mark from a VM's description. managed reports whether the
// description says the VM is pveflow's; a VM is the proxy uid's only when managed and
// m.UID == uid. Lines other than the mark's, CRLF line ends and spaces around keys and values
// are ignored, as people edit descriptions in the PVE UI. A CreatedAt that does not parse is
// left zero: it informs, it does not decide ownership.
func ParseDescription(s string) (m Mark, managed bool) {
	for line := range strings.Lines(s) {
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case keyManaged:
			managed = value == "true"
		case keyUID:
			m.UID = value
		case keyCreatedAt:
			m.CreatedAt, _ = time.Parse(time.RFC3339, value)
		case keyInstanceID:
			m.InstanceID = value
		case keyImage:
			m.Image = value
		case keySpec:
			// A spec a person broke in the UI is no spec: the VM is the proxy's all the same.
			var spec Spec
			// Into a struct: no map is ranged, so it is deterministic in workflow code.
			err := json.Unmarshal([]byte(value), &spec) //workflowcheck:ignore
			if err == nil {
				m.Spec = &spec
			}
		case keyOp:
			// One a person broke owes a reboot all the same, which costs a reboot at worst:
			// what it did is lost.
			var op Op
			err := json.Unmarshal([]byte(value), &op) //workflowcheck:ignore
			if err != nil {
				op = Op{RebootOwed: true}
			}
			m.Op = &op
		}
	}
	return m, managed
}

// Tag is the tag pveflow sets on its VMs so that people can filter them in the PVE UI. It is
// not the mark: tags cannot be set by the clone call, so they come later and may be missing.
// PVE accepts an underscore in a tag under every tag style, a hyphen not under all.
const Tag = "proxy_operator"

// splitTags splits a tag list as PVE does: at ';', ',', NULs and white space.
func splitTags(tags string) []string {
	return strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == 0 || unicode.IsSpace(r) })
}

// MergeTags is PVE's tag list for a VM that keeps its tags (as PVE lists them: separated by
// ';', ',' or spaces) and gains extra ones: lower case, sorted, each once, joined with ';', as
// PVE stores them. A proxy's VM so keeps the template's tags beside pveflow's own.
func MergeTags(existing string, extra ...string) string {
	var tags []string
	for _, t := range append(splitTags(existing), extra...) {
		tags = append(tags, strings.ToLower(t))
	}
	slices.Sort(tags)
	return strings.Join(slices.Compact(tags), ";")
}

// OwnerOf is the one rule for whose VM a config is: the UID in its mark. A VM without a mark
// (made by hand, or by another tool) has owner "". known is false only while a clone copies its
// disks under PVE's temporary config ("lock: clone" and no mark yet): the clone's caller wrote a
// mark into the clone call, but PVE shows it only once the first disk is copied, for a
// single-disk template only when the clone ends. Until then nobody can tell whose VM it is.
func OwnerOf(cfg pve.VMConfig) (uid string, known bool) {
	if mark, managed := ParseDescription(cfg["description"]); managed {
		return mark.UID, true
	}
	return "", cfg["lock"] != "clone"
}
