package pvesim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/google/uuid"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pveschema"
)

// PVE's VMID range (pve-vmid).
const (
	minVMID = 100
	maxVMID = 999999999
)

const mib = 1 << 20

func checkVMID(param string, id int) error {
	switch {
	case id < minVMID:
		return paramErr(map[string]string{param: fmt.Sprintf("value must have a minimum value of %d", minVMID)})
	case id > maxVMID:
		return paramErr(map[string]string{param: fmt.Sprintf("value must have a maximum value of %d", maxVMID)})
	}
	return nil
}

// splitList is PVE's split_list: items separated by commas, semicolons, white space or NULs.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ';' || r == 0 || unicode.IsSpace(r)
	})
}

var (
	diskKeyRE = regexp.MustCompile(`^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$`)
	netKeyRE  = regexp.MustCompile(`^net([0-9]|[12][0-9]|3[01])$`)
	// dnsNameRE is PVE's dns-name format: no underscores.
	dnsNameRE = regexp.MustCompile(`^(([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`)
	// sizeRE is PVE's size string; a leading + makes a resize relative.
	sizeRE = regexp.MustCompile(`^(\+)?(\d+(?:\.\d+)?)([KMGT])?$`)
)

func isDiskKey(key string) bool { return diskKeyRE.MatchString(key) }

// A drive is "<volid>[,opt=value...]", the volid possibly written as "file=<volid>".
func driveVolID(value string) string {
	first, _, _ := strings.Cut(value, ",")
	return strings.TrimPrefix(first, "file=")
}

func driveOpt(value, key string) string {
	for _, opt := range strings.Split(value, ",")[1:] {
		if k, v, ok := strings.Cut(opt, "="); ok && k == key {
			return v
		}
	}
	return ""
}

func isCDROM(value string) bool { return driveOpt(value, "media") == "cdrom" }

// driveSize is a drive's size= in bytes (PVE's size string: a number with an optional K, M,
// G or T), 0 if it has none.
func driveSize(value string) int64 {
	m := sizeRE.FindStringSubmatch(driveOpt(value, "size"))
	if m == nil || m[1] != "" {
		return 0
	}
	return scaleSize(m[2], m[3])
}

// withDrive rewrites a drive's volid and size, keeping its other options.
func withDrive(value, volid string, size int64) string {
	parts := []string{volid}
	for _, opt := range strings.Split(value, ",")[1:] {
		if !strings.HasPrefix(opt, "size=") {
			parts = append(parts, opt)
		}
	}
	return strings.Join(append(parts, "size="+formatSize(size)), ",")
}

func scaleSize(number, unit string) int64 {
	f, _ := strconv.ParseFloat(number, 64)
	if unit != "" {
		f *= float64(int64(1) << (10 * (strings.Index("KMGT", unit) + 1)))
	}
	return int64(f)
}

// formatSize is PVE's format_size: the largest unit that divides the size exactly.
func formatSize(n int64) string {
	units := []string{"", "K", "M", "G", "T"}
	i := 0
	for i < len(units)-1 && n != 0 && n%1024 == 0 {
		n /= 1024
		i++
	}
	return strconv.FormatInt(n, 10) + units[i]
}

// volumeOwner is the VMID a disk volume belongs to: vm-<id>-disk-N, base-<id>-disk-N, or a
// linked clone's base-<b>-disk-M/vm-<id>-disk-N. 0 for ISOs and anything else.
func volumeOwner(name string) int {
	if _, after, ok := strings.Cut(name, "/"); ok && !strings.HasPrefix(name, "iso/") {
		name = after
	}
	for _, prefix := range []string{"vm-", "base-"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			id, _, _ := strings.Cut(rest, "-")
			n, _ := strconv.Atoi(id)
			return n
		}
	}
	return 0
}

// netModels are the NIC models PVE's net[n] accepts as "<model>=<MAC>".
var netModels = map[string]bool{"virtio": true, "e1000": true, "e1000e": true, "rtl8139": true, "vmxnet3": true}

// parseNet reads a net[n] value: "<model>[=<MAC>],bridge=...", or with model= and macaddr=.
func parseNet(value string) (model, mac string) {
	for _, opt := range strings.Split(value, ",") {
		k, v, _ := strings.Cut(opt, "=")
		switch {
		case netModels[k]:
			model, mac = k, v
		case k == "model":
			model = v
		case k == "macaddr":
			mac = v
		}
	}
	return model, mac
}

// netNetwork is the network of a net[n] value: its bridge and VLAN tag.
func netNetwork(value string) Network {
	var n Network
	for _, opt := range strings.Split(value, ",") {
		switch k, v, _ := strings.Cut(opt, "="); k {
		case "bridge":
			n.Bridge = v
		case "tag":
			n.VLAN, _ = strconv.Atoi(v)
		}
	}
	return n
}

// withNetMAC is a net[n] value in PVE's own form, "<model>=<MAC>,<other options>".
func withNetMAC(value, mac string) string {
	model, _ := parseNet(value)
	parts := []string{model + "=" + mac}
	for _, opt := range strings.Split(value, ",") {
		k, _, _ := strings.Cut(opt, "=")
		if !netModels[k] && k != "model" && k != "macaddr" {
			parts = append(parts, opt)
		}
	}
	return strings.Join(parts, ",")
}

// macFor is a MAC with Proxmox's prefix for a VM's NIC. PVE draws it at random; deriving it
// from the VMID keeps tests deterministic while VMIDs keep MACs apart.
func macFor(vmid int, key string) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%s", vmid, key)
	s := h.Sum32()
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", byte(s>>16), byte(s>>8), byte(s))
}

// vmUUIDs is the namespace of uuidFor's UUIDs: any fixed UUID would do.
var vmUUIDs = uuid.MustParse("6f1d3c2a-8e4b-4f7a-9d15-0c2b7e9a4f38")

// uuidFor is a UUID derived from the VMID and what it is for, a clone's smbios1 and vmgenid. PVE
// draws them at random; a name-based (version 5) UUID keeps tests deterministic while the VMID
// keeps VMs apart, as macFor does for MACs.
func uuidFor(vmid int, what string) string {
	return uuid.NewSHA1(vmUUIDs, fmt.Appendf(nil, "%d/%s", vmid, what)).String()
}

// parseBool reads a boolean inside a property string.
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "1", "on", "yes", "true":
		return true, true
	case "0", "off", "no", "false":
		return false, true
	}
	return false, false
}

// agentEnabled reads agent: "[enabled=]<bool>[,...]".
func agentEnabled(cfg pve.VMConfig) bool {
	first, _, _ := strings.Cut(cfg["agent"], ",")
	on, _ := parseBool(strings.TrimPrefix(first, "enabled="))
	return on
}

// memoryMiB reads memory: "[current=]<MiB>[,...]"; PVE's default is 512.
func memoryMiB(cfg pve.VMConfig) int64 {
	first, _, _ := strings.Cut(cfg["memory"], ",")
	n, err := strconv.ParseInt(strings.TrimPrefix(first, "current="), 10, 64)
	if err != nil {
		return 512
	}
	return n
}

func intOr(cfg pve.VMConfig, key string, def int) int {
	n, err := strconv.Atoi(cfg[key])
	if err != nil {
		return def
	}
	return n
}

func cpus(cfg pve.VMConfig) int { return intOr(cfg, "cores", 1) * intOr(cfg, "sockets", 1) }

// bootDiskSize is the size of the first disk in the boot order, else of the first of scsi0,
// virtio0, sata0 and ide0: what PVE reports as maxdisk.
func bootDiskSize(cfg pve.VMConfig) int64 {
	order := strings.TrimPrefix(cfg["boot"], "order=")
	keys := append(strings.Split(order, ";"), "scsi0", "virtio0", "sata0", "ide0")
	for _, key := range keys {
		if v, ok := cfg[key]; ok && isDiskKey(key) && !isCDROM(v) {
			return driveSize(v)
		}
	}
	return 0
}

// digest is the SHA-1 of the config PVE reports so that a writer can detect a concurrent change.
func digest(cfg pve.VMConfig) string {
	h := sha1.New()
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		fmt.Fprintf(h, "%s: %s\n", k, cfg[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// description is how PVE stores a description: as comment lines, so it reads back with a
// trailing newline, and an empty one is no description at all.
func description(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return s + "\n"
}

// configSchema is PVE's schema of a config write (PUT .../config), whose checks every config
// write passes first, property strings included (pveschema.Endpoint.CheckValue).
var configSchema = sync.OnceValue(func() pveschema.Endpoint {
	ep, ok := pveschema.Lookup(http.MethodPut, "/nodes/pve1/qemu/100/config")
	if !ok {
		panic("pvesim: no schema for a config write")
	}
	return ep
})

// configKeys are the config keys the model takes, each with how PVE stores a value that passed
// the schema, where that is not as given (nil). A key the schema has but the model lacks is
// refused as the schema refuses an unknown one, so that a write the model cannot follow fails
// its test.
var configKeys = map[string]func(string) string{
	"name":        nil,
	"description": description,
	"cores":       canonicalInt,
	"sockets":     canonicalInt,
	"memory":      nil,
	"agent":       nil,
	"tags":        uniqueTags,
	"boot":        nil,
	"onboot":      nil,
	"protection":  nil,
	"ostype":      nil,
}

// configKeyRE are the numbered config keys the model takes, stored as given.
var configKeyRE = regexp.MustCompile(`^(ide[0-3]|scsi([0-9]|[12][0-9]|30)|(net|ipconfig)([0-9]|[12][0-9]|3[01]))$`)

func checkName(_, v string) (string, string) {
	if !dnsNameRE.MatchString(v) {
		return "", "invalid format - value does not look like a valid DNS name\n"
	}
	return v, ""
}

// canonicalInt is an integer the schema took, as Perl's number.
func canonicalInt(v string) string {
	n, _ := strconv.Atoi(v)
	return strconv.Itoa(n)
}

// uniqueTags is PVE's get_unique_tags of a pve-tag-list: lower-cased, sorted, de-duplicated,
// joined with ';'.
func uniqueTags(v string) string {
	var tags []string
	for _, t := range splitList(v) {
		tags = append(tags, strings.ToLower(t))
	}
	slices.Sort(tags)
	return strings.Join(slices.Compact(tags), ";")
}

// configUpdate is a config write whose parameters passed the schema.
type configUpdate struct {
	set    pve.VMConfig
	delete []string
	digest string
}

// parseConfigUpdate checks a config write's parameters; every failing one is named in the 400.
func parseConfigUpdate(params pve.VMConfig) (configUpdate, error) {
	u := configUpdate{set: pve.VMConfig{}}
	errs := make(map[string]string)
	for key, value := range params {
		if msg := configSchema().CheckValue(key, value); msg != "" {
			errs[key] = msg
			continue
		}
		switch key {
		case "delete":
			u.delete = splitList(value)
			continue
		case "digest":
			u.digest = value
			continue
		}
		store, known := configKeys[key]
		switch {
		case !known && !configKeyRE.MatchString(key):
			errs[key] = "property is not defined in schema and the schema does not allow additional properties"
			continue
		case store != nil:
			value = store(value)
		}
		u.set[key] = value
	}
	for _, key := range u.delete {
		if _, ok := params[key]; ok {
			errs["delete"] = fmt.Sprintf("you can't use '-%s' and -delete %s' at the same time", key, key)
		}
	}
	if len(errs) > 0 {
		return configUpdate{}, paramErr(errs)
	}
	return u, nil
}
