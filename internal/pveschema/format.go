package pveschema

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A formatCheck is one of PVE's registered format validators. It returns "" for a valid value,
// else the text PVE dies with, trailing newline included, since that newline reaches the client.
type formatCheck func(v string) string

// formats are the validators pveflow's requests depend on; values of any other format pass.
var formats = map[string]formatCheck{
	"pve-vmid":       matching(`^[1-9][0-9]{2,8}$`, "value does not look like a valid VM ID\n"),
	"pve-node":       matching(`^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`, "value does not look like a valid node name\n"),
	"dns-name":       matching(`^(([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`, "value does not look like a valid DNS name\n"),
	"pve-tag":        matching(`(?i)^[a-z0-9_][a-z0-9_\-+.]*$`, "invalid characters in tag\n"),
	"pve-storage-id": checkStorageID,
	"pve-configid": func(v string) string {
		if configIDRE.MatchString(v) {
			return ""
		}
		return "invalid configuration ID '" + v + "'\n"
	},
	// The formats of keys of the property strings net[n] and ipconfig[n].
	"pve-bridge-id": func(v string) string {
		if bridgeIDRE.MatchString(v) {
			return ""
		}
		return "invalid bridge ID '" + v + "'\n"
	},
	"mac-addr": matching(`(?i)^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$`, "value does not look like a valid unicast MAC address\n"),
	"ipv4": func(v string) string {
		if isIPv4(v) {
			return ""
		}
		return "value does not look like a valid IPv4 address\n"
	},
	"ipv6": func(v string) string {
		if isIPv6(v) {
			return ""
		}
		return "value does not look like a valid IPv6 address\n"
	},
	"pve-ipv4-config": func(v string) string {
		if v == "dhcp" || v == "manual" || isCIDR(v, isIPv4, 32) {
			return ""
		}
		return "value does not look like a valid ipv4 network configuration\n"
	},
	"pve-ipv6-config": func(v string) string {
		if v == "auto" || v == "dhcp" || v == "manual" || isCIDR(v, isIPv6, 128) {
			return ""
		}
		return "value does not look like a valid ipv6 network configuration\n"
	},
}

// isIPv4 and isIPv6 are pve-common's IPV4RE and IPV6RE (src/PVE/ParseUtils.pm): dotted quads
// without leading zeros, and RFC 3986's IPv6 without a zone.
func isIPv4(v string) bool {
	a, err := netip.ParseAddr(v)
	return err == nil && a.Is4()
}

func isIPv6(v string) bool {
	a, err := netip.ParseAddr(v)
	return err == nil && a.Is6() && a.Zone() == ""
}

// isCIDR is pve_verify_cidrv4 and pve_verify_cidrv6: an address and a prefix length of 8 to
// maxBits.
func isCIDR(v string, isAddr func(string) bool, maxBits int) bool {
	addr, bits, ok := strings.Cut(v, "/")
	n, err := strconv.Atoi(bits)
	return ok && isAddr(addr) && digitsRE.MatchString(bits) && err == nil && n > 7 && n <= maxBits
}

var (
	storageIDRE = regexp.MustCompile(`(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$`)
	configIDRE  = regexp.MustCompile(`(?i)^[a-z][a-z0-9_-]+$`)
	bridgeIDRE  = regexp.MustCompile(`^[-_.\w\d]+$`)
	digitsRE    = regexp.MustCompile(`^\d+$`)
)

func matching(re, msg string) formatCheck {
	r := regexp.MustCompile(re)
	return func(v string) string {
		if r.MatchString(v) {
			return ""
		}
		return msg
	}
}

func checkStorageID(v string) string {
	switch {
	case utf8.RuneCountInString(v) < 2:
		return "storage ID '" + v + "' cannot be shorter than 2 characters\n"
	case !storageIDRE.MatchString(v):
		return "storage ID '" + v + "' contains illegal characters\n"
	}
	return ""
}

// checkFormat is PVE's check_format: a name ending in -list is a list of the base format,
// split like PVE::Tools::split_list.
func checkFormat(format, v string) string {
	base, isList := strings.CutSuffix(format, "-list")
	check, ok := formats[base]
	if !ok {
		return ""
	}
	if !isList {
		return check(v)
	}
	for _, item := range splitList(v) {
		if msg := check(item); msg != "" {
			return msg
		}
	}
	return ""
}

// splitList splits on NUL when there is one, else on commas, semicolons and white space.
func splitList(v string) []string {
	if strings.Contains(v, "\x00") {
		return strings.Split(v, "\x00")
	}
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' || isPerlSpace(r) })
}
