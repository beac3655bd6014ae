package proxy

import "regexp"

// SeedISOName is the file name of the NoCloud seed ISO of the VM named name. It carries the VM's
// name, so a seed ISO left behind by a VM that is gone can still be told apart.
func SeedISOName(name string) string {
	return name + "-seed.iso"
}

// SeedVolID is the volume ID of the seed ISO in storage, as attached to ide2 and deleted.
func SeedVolID(storage, name string) string {
	return storage + ":iso/" + SeedISOName(name)
}

// seedVolIDRE matches the volume ID of a seed ISO named after a UID (SeedVolID of a
// NameFromUID name), capturing the name.
var seedVolIDRE = regexp.MustCompile(`^[^:]+:iso/(` + namePrefix + `[a-z2-7]{16})-seed\.iso$`)

// SeedISOOwner is the name of the VM whose seed ISO volid is, when volid is the seed ISO of a
// name NameFromUID makes. Seed ISOs of proxies created with a name of their own, and every other
// ISO, are not recognised: garbage collection leaves them alone.
func SeedISOOwner(volid string) (name string, ok bool) {
	m := seedVolIDRE.FindStringSubmatch(volid)
	if m == nil {
		return "", false
	}
	return m[1], true
}
