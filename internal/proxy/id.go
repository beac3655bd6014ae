// Package proxy says what a proxy VM is on Proxmox VE: the name, provider ID and VMID derived
// from the Proxy's UID, the mark in its description that makes it pveflow's, and how its config,
// status and guest agent answers are read. It does no I/O, so workflows may call it directly.
package proxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/nocloud"
)

// nameEncoding is RFC 4648 base32 in lower case, as hostnames are written.
var nameEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NameFromUID is the VM name of the proxy with this UID: "proxy-" and 16 base32 characters
// (80 bits) of the UID's SHA-256, 22 characters in all. ValidateName accepts it.
func NameFromUID(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return namePrefix + nameEncoding.EncodeToString(sum[:10])
}

// namePrefix begins every name NameFromUID makes.
const namePrefix = "proxy-"

// vmidRE is PVE's own VMID format: 100 to 999999999, without sign or leading zero.
var vmidRE = regexp.MustCompile(`^[1-9][0-9]{2,8}$`)

// ValidateName reports why name cannot be a proxy VM's name, or nil. It is the one rule for
// names, checked before any Proxmox call: an RFC 1123 label, 1 to 63 ASCII letters, digits and
// '-', neither first nor last a '-'. PVE takes a DNS name (dots too), but the name is also the
// guest's hostname, cloud-init's local-hostname, which must be a label. Letters keep their case
// everywhere, in the provider ID too, so every name it accepts round-trips through
// FormatProviderID and ParseProviderID.
func ValidateName(name string) error {
	if !nocloud.IsDNSLabel(name) {
		return fmt.Errorf("name %q is not a DNS label: want 1 to 63 ASCII letters, digits and '-', not starting or ending with '-'", name)
	}
	return nil
}

// FormatProviderID is the provider ID of a proxy VM, "vms/<vmid>/<name>". It names no node:
// VMs migrate, so the node is looked up on every call.
func FormatProviderID(vmid int, name string) string {
	return "vms/" + strconv.Itoa(vmid) + "/" + name
}

// ParseProviderID takes apart an ID made by FormatProviderID, refusing anything else.
func ParseProviderID(id string) (vmid int, name string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] != "vms" {
		return 0, "", fmt.Errorf("provider id %q: want vms/<vmid>/<name>", id)
	}
	if !vmidRE.MatchString(parts[1]) {
		return 0, "", fmt.Errorf("provider id %q: vmid %q is not a number in 100..999999999", id, parts[1])
	}
	if err := ValidateName(parts[2]); err != nil {
		return 0, "", fmt.Errorf("provider id %q: %w", id, err)
	}
	vmid, _ = strconv.Atoi(parts[1])
	return vmid, parts[2], nil
}

// MaxProbes bounds how many VMIDs of its probe sequence a create tries. It is part of what a
// proxy is: a create clones only onto VMIDFor(uid, r, k) for k below MaxProbes, so those VMIDs
// are where a lookup by UID alone finds a proxy's VMs in every state, whatever name they show.
const MaxProbes = 32

// ProbeVMIDs is the set of VMIDs a create of uid may clone onto in r.
func ProbeVMIDs(uid string, r config.VMIDRange) map[int]bool {
	probes := make(map[int]bool, MaxProbes)
	for k := range MaxProbes {
		probes[VMIDFor(uid, r, k)] = true
	}
	return probes
}

// VMIDFor is the VMID to try for the proxy with this UID at the given attempt: FNV-1a 64 of the
// UID mapped into r, plus attempt, wrapping around within r. Attempt 0 is the UID's home VMID;
// when it is taken, attempt 1 tries the next one, and so on. r must be valid (min below max).
func VMIDFor(uid string, r config.VMIDRange, attempt int) int {
	h := fnv.New64a()
	h.Write([]byte(uid))
	span := r.Max - r.Min + 1
	home := int(h.Sum64() % uint64(span))
	return r.Min + (home+attempt%span+span)%span
}
