package proxy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
)

// Machine is what a VM is made of, in a machine type's terms. A zero field is one the config
// did not tell (MachineOf says why): Drift passes it over.
type Machine struct {
	Cores     int
	MemoryMiB int64
	// BootDisk is the boot disk's config key (BootDisk), such as "scsi0".
	BootDisk string
	// DiskGiB is the boot disk's size in GiB, rounded down: a disk is smaller than a whole
	// number of GiB exactly when its rounded-down size is.
	DiskGiB int64
	// NICs are the VM's net[n] values by key (NICsOf); nil when unknown, or the VM has none.
	NICs pve.VMConfig
}

// PVE's values for the keys a config leaves out (qemu-server's defaults).
const (
	defaultCores     = 1
	defaultMemoryMiB = 512
)

// MachineOf reads cores, memory, the boot disk's size and the NICs from a VM's config, as PVE
// reads them: cores and memory left out are PVE's defaults (1 core, 512 MiB), and memory may be
// written as "current=<MiB>". A value it cannot read stays zero in the Machine, and the error
// names it.
func MachineOf(cfg pve.VMConfig) (Machine, error) {
	m := Machine{NICs: NICsOf(cfg)}
	var errs []error
	m.Cores = defaultCores
	if v, ok := cfg["cores"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			m.Cores = 0
			errs = append(errs, fmt.Errorf("cores %q is not a number of cores", v))
		} else {
			m.Cores = n
		}
	}
	m.MemoryMiB = defaultMemoryMiB
	if v, ok := cfg["memory"]; ok {
		n, err := memoryMiB(v)
		if err != nil {
			m.MemoryMiB = 0
			errs = append(errs, err)
		} else {
			m.MemoryMiB = n
		}
	}
	disk, err := BootDisk(cfg)
	if err != nil {
		return m, errors.Join(append(errs, err)...)
	}
	m.BootDisk = disk
	size, err := DiskSizeGiB(cfg[disk])
	if err != nil {
		errs = append(errs, fmt.Errorf("boot disk %s: %w", disk, err))
	} else {
		m.DiskGiB = int64(math.Floor(size))
	}
	return m, errors.Join(errs...)
}

// memoryMiB reads PVE's memory value, "[current=]<MiB>" with more options after a comma.
func memoryMiB(value string) (int64, error) {
	first, _, _ := strings.Cut(value, ",")
	n, err := strconv.ParseInt(strings.TrimPrefix(first, "current="), 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("memory %q is not a size in MiB", value)
	}
	return n, nil
}

// A Difference is one way a VM differs from its machine type.
type Difference struct {
	// What is DiffCores, DiffMemory or DiffDisk.
	What string
	// Have is the VM's, Want the machine type's: cores, MiB or GiB.
	Have, Want int64
	// Disk is the boot disk's config key, for DiffDisk; it may be unknown (empty).
	Disk string
}

// What a Difference is about.
const (
	DiffCores  = "cores"
	DiffMemory = "memory"
	DiffDisk   = "disk"
)

// String says how the VM drifted from its spec: "cores 2, spec 4", "memory 2048 MiB, spec
// 4096 MiB", "disk scsi0 10G, spec 20G".
func (d Difference) String() string {
	switch d.What {
	case DiffMemory:
		return fmt.Sprintf("memory %d MiB, spec %d MiB", d.Have, d.Want)
	case DiffDisk:
		return fmt.Sprintf("%s %dG, spec %dG", d.diskName(), d.Have, d.Want)
	}
	return fmt.Sprintf("%s %d, spec %d", d.What, d.Have, d.Want)
}

// Change says what putting the difference right changes: "cores 2 -> 4", "memory 2048 -> 4096
// MiB", "disk scsi0 10G -> 20G".
func (d Difference) Change() string {
	switch d.What {
	case DiffMemory:
		return fmt.Sprintf("memory %d -> %d MiB", d.Have, d.Want)
	case DiffDisk:
		return fmt.Sprintf("%s %dG -> %dG", d.diskName(), d.Have, d.Want)
	}
	return fmt.Sprintf("%s %d -> %d", d.What, d.Have, d.Want)
}

func (d Difference) diskName() string {
	if d.Disk == "" {
		return "disk"
	}
	return "disk " + d.Disk
}

// Drift lists where m differs from the machine type p resolved: cores, memory, and a boot disk
// smaller than p's DiskGiB. A larger disk is not drift, since PVE cannot shrink one, and neither
// is any disk when p keeps the template's (DiskGiB 0). What m does not know (a zero field) is
// passed over.
func (m Machine) Drift(p config.Placement) []Difference {
	var ds []Difference
	if m.Cores != 0 && m.Cores != p.Cores {
		ds = append(ds, Difference{What: DiffCores, Have: int64(m.Cores), Want: int64(p.Cores)})
	}
	if m.MemoryMiB != 0 && m.MemoryMiB != p.MemoryMiB {
		ds = append(ds, Difference{What: DiffMemory, Have: m.MemoryMiB, Want: p.MemoryMiB})
	}
	if m.DiskGiB != 0 && m.DiskGiB < p.DiskGiB {
		ds = append(ds, Difference{What: DiffDisk, Have: m.DiskGiB, Want: p.DiskGiB, Disk: m.BootDisk})
	}
	return ds
}

// NICDrift lists the changes that give m the NICs nics, net0 on bridge (NICChanges). NICs m does
// not know (nil) are passed over, as Drift passes over any field m does not know.
func (m Machine) NICDrift(bridge string, nics []config.NIC) []NICChange {
	if m.NICs == nil {
		return nil
	}
	return NICChanges(m.NICs, bridge, nics)
}
