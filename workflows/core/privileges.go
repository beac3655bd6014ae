package core

import (
	"fmt"
	"slices"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// PrivilegeTarget is what fills pve.PrivilegeRules in for a proxy on node with one of nicSets,
// waiting for cloud-init when cloudInit says so, cloned from templates onto cloneStorages; an empty one (the template's, not known yet) is
// left out. net holds the templates' NICs and the vnets' zones, when read: the NICs written
// are those proxy.NICValues gives a clone of each template.
func (s Settings) PrivilegeTarget(node string, nicSets [][]config.NIC, cloudInit bool, net activities.NetworkAccess, templates []int, cloneStorages ...string) pve.PrivilegeTarget {
	t := pve.PrivilegeTarget{Node: node, ISOStorage: s.ISOStorage, Pool: s.Pool, Templates: templates, HA: s.HA.Enabled, CloudInit: cloudInit, Zones: net.Zones}
	t.Network = s.Bridge != "" || slices.ContainsFunc(nicSets, func(nics []config.NIC) bool { return len(nics) > 0 })
	for _, vmid := range templates {
		tmpl := net.TemplateNICs[vmid]
		t.TemplateNICs = appendNetworks(t.TemplateNICs, tmpl)
		if !t.Network {
			continue
		}
		for _, nics := range nicSets {
			t.NICs = appendNetworks(t.NICs, proxy.NICValues(tmpl, s.Bridge, nics))
		}
	}
	for _, storage := range cloneStorages {
		if storage != "" && !slices.Contains(t.CloneStorages, storage) {
			t.CloneStorages = append(t.CloneStorages, storage)
		}
	}
	return t
}

// appendNetworks appends the networks of the net[n] values of nets, net0 first, that dst does
// not hold yet.
func appendNetworks(dst []pve.NICNetwork, nets pve.VMConfig) []pve.NICNetwork {
	for i := range config.MaxNICs {
		value, set := nets[fmt.Sprint("net", i)]
		if !set {
			continue
		}
		if n, ok := pve.NetworkOf(value); ok && !slices.Contains(dst, n) {
			dst = append(dst, n)
		}
	}
	return dst
}

// RequiredPaths are the paths of required, each once, in order.
func RequiredPaths(required ...[]pve.PathPrivileges) []string {
	var paths []string
	for _, r := range required {
		for _, p := range r {
			if !slices.Contains(paths, p.Path) {
				paths = append(paths, p.Path)
			}
		}
	}
	return paths
}
