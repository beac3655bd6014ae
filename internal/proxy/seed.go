package proxy

// SeedISOName is the file name of the NoCloud seed ISO of the VM named name. It carries the VM's
// name, so a seed ISO left behind by a VM that is gone can still be told apart.
func SeedISOName(name string) string {
	return name + "-seed.iso"
}

// SeedVolID is the volume ID of the seed ISO in storage, as attached to ide2 and deleted.
func SeedVolID(storage, name string) string {
	return storage + ":iso/" + SeedISOName(name)
}
