package proxy

import (
	"fmt"
	"regexp"
)

// MaxUIDLength is the longest Proxy UID pveflow accepts.
const MaxUIDLength = 128

// uidRE is the alphabet of a Proxy UID: ASCII letters and digits, then also '-', '_' and '.'.
// Kubernetes UIDs (UUIDs), ULIDs, nanoids and object names up to MaxUIDLength fit. Nothing else may: the UID
// is written into the VM's mark as "key=value" lines, where white space is trimmed on reading
// and a line break would start a forged line, and into workflow IDs, where a '/' would blur
// "proxy/<uid>/create".
var uidRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidateUID reports why uid cannot be a Proxy UID, or nil. The message quotes the UID so that
// an invisible trailing space or line break shows.
func ValidateUID(uid string) error {
	switch {
	case uid == "":
		return fmt.Errorf("the proxy UID is empty")
	case len(uid) > MaxUIDLength:
		return fmt.Errorf("proxy UID %.40q... is %d bytes long; at most %d are allowed", uid, len(uid), MaxUIDLength)
	case !uidRE.MatchString(uid):
		return fmt.Errorf("proxy UID %q: only ASCII letters, digits, '-', '_' and '.' are allowed, starting with a letter or digit", uid)
	}
	return nil
}
