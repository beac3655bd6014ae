package proxy

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pveflow/pveflow/internal/pve"
)

// option returns the value of key in a PVE property string such as
// "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0" or "local-lvm:vm-100-disk-0,size=20G".
func option(prop, key string) (string, bool) {
	for part := range strings.SplitSeq(prop, ",") {
		if k, v, ok := strings.Cut(part, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// diskKeyRE matches the config keys that can hold a boot disk (PVE's pve-qm-bootdisk format).
var diskKeyRE = regexp.MustCompile(`^(ide|sata|scsi|virtio)[0-9]+$`)

// BootDisk is the config key of the VM's boot disk, the one a machine type's diskGiB grows: the
// first disk in "boot: order=...", else the legacy "bootdisk", else the first present of scsi0,
// virtio0, sata0 and ide0. NICs, CD-ROMs (the seed ISO's ide2) and keys the config does not
// hold are passed over.
func BootDisk(cfg pve.VMConfig) (string, error) {
	isDisk := func(key string) bool {
		value, ok := cfg[key]
		media, _ := option(value, "media")
		return ok && diskKeyRE.MatchString(key) && media != "cdrom"
	}
	order, _ := option(cfg["boot"], "order")
	for dev := range strings.SplitSeq(order, ";") {
		if isDisk(dev) {
			return dev, nil
		}
	}
	if isDisk(cfg["bootdisk"]) {
		return cfg["bootdisk"], nil
	}
	fallbacks := []string{"scsi0", "virtio0", "sata0", "ide0"}
	if i := slices.IndexFunc(fallbacks, isDisk); i >= 0 {
		return fallbacks[i], nil
	}
	return "", fmt.Errorf("no boot disk: boot order %q names none, and the VM has none of %s",
		order, strings.Join(fallbacks, ", "))
}

// diskSizeRE is PVE's disk size: a number with an optional binary unit, bytes without one.
var diskSizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([KMGT]?)$`)

// DiskSizeGiB is the size of a disk in GiB, from the size= option of its config value, such as
// "local-lvm:vm-100-disk-0,iothread=1,size=20G".
func DiskSizeGiB(disk string) (float64, error) {
	size, ok := option(disk, "size")
	if !ok {
		return 0, errors.New("disk has no size")
	}
	m := diskSizeRE.FindStringSubmatch(size)
	if m == nil {
		return 0, fmt.Errorf("disk size %q is not a size", size)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("disk size %q: %w", size, err)
	}
	// A size without a unit is in bytes, 2^-30 GiB; each unit is 2^10 of the one before.
	exp := -30
	if m[2] != "" {
		exp += 10 * (strings.Index("KMGT", m[2]) + 1)
	}
	return math.Ldexp(n, exp), nil
}

// NeedsResize reports whether the disk (a config value) is smaller than wantGiB and so must
// be grown. A wantGiB of 0 keeps the template's size, and PVE cannot shrink a disk, so a
// larger disk is left as it is.
func NeedsResize(disk string, wantGiB int64) (bool, error) {
	if wantGiB <= 0 {
		return false, nil
	}
	size, err := DiskSizeGiB(disk)
	if err != nil {
		return false, err
	}
	return size < float64(wantGiB), nil
}

// RewriteNet0 sets the bridge of a NIC's config value, keeping its model=MAC part, and so its
// MAC address, and every other option in place. An empty bridge, or an empty net0 (a VM without
// that NIC), leaves net0 as it is.
func RewriteNet0(net0, bridge string) string {
	if bridge == "" || net0 == "" {
		return net0
	}
	parts := strings.Split(net0, ",")
	for i, part := range parts {
		if key, _, _ := strings.Cut(part, "="); key == "bridge" {
			parts[i] = "bridge=" + bridge
			return strings.Join(parts, ",")
		}
	}
	// PVE writes the bridge right after the model.
	return strings.Join(slices.Insert(parts, 1, "bridge="+bridge), ",")
}

var macRE = regexp.MustCompile(`^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$`)

// MACFromNet is the MAC address of a NIC's config value, such as "virtio=BC:24:11:2E:C5:4A,
// bridge=vmbr0", or "" if it has none. The MAC is the value of the model=MAC part, or of
// macaddr= in the long form; no other NIC option holds one.
func MACFromNet(net string) string {
	for part := range strings.SplitSeq(net, ",") {
		if _, v, ok := strings.Cut(part, "="); ok && macRE.MatchString(v) {
			return v
		}
	}
	return ""
}

// driveBuses are PVE's drive buses and how many drives each takes (qm.conf: ide0-3, sata0-5,
// scsi0-30, virtio0-15).
var driveBuses = []struct {
	bus    string
	drives int
}{{"ide", 4}, {"sata", 6}, {"scsi", 31}, {"virtio", 16}}

// ISOVolumes are the ISO images a VM's drives refer to, such as "local:iso/seed.iso" of
// "ide2: local:iso/seed.iso,media=cdrom", in drive order. The keys are walked in a fixed order,
// not the config's, so that a workflow may call it.
func ISOVolumes(cfg pve.VMConfig) []string {
	var out []string
	for _, b := range driveBuses {
		for i := range b.drives {
			volid, _, _ := strings.Cut(cfg[fmt.Sprint(b.bus, i)], ",")
			if strings.Contains(volid, ":iso/") {
				out = append(out, volid)
			}
		}
	}
	return out
}
