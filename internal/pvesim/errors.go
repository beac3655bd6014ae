package pvesim

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/pveflow/pveflow/internal/pve"
)

// ErrDropConnection is an injected failure the REST server answers by closing the connection
// without a response, as a restarting pveproxy or a broken network does. Callers of the model
// itself see it as an ordinary error.
var ErrDropConnection = errors.New("pvesim: connection dropped")

// apiErr is a failure as PVE's HTTP layer renders it: the message's first line is the reason
// phrase, the message without its trailing newline is the body's message.
func apiErr(status int, format string, args ...any) *pve.APIError {
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	reason, _, _ := strings.Cut(msg, "\n")
	return &pve.APIError{Status: status, Reason: reason, Message: msg}
}

// paramErr is PVE's 400 for parameters that fail the schema or a handler's own check
// (raise_param_exc): one message per parameter.
func paramErr(errs map[string]string) *pve.APIError {
	e := apiErr(http.StatusBadRequest, "Parameter verification failed.")
	e.Errors = errs
	return e
}

// serverErr is a plain die in a handler: a 500 with the died text.
func serverErr(text string) *pve.APIError {
	return apiErr(http.StatusInternalServerError, "%s", text)
}

// The texts below are PVE 9.x's (see testdata/pve); task exit statuses use them too.

func noConfigText(node string, vmid int) string {
	return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
}

// noNodeText is what a proxied call to a node that is not in the cluster dies with: pveproxy
// falls back to resolving the name, and the lookup fails.
func noNodeText(node string) string {
	return fmt.Sprintf("hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", node, node)
}

func lockedText(lock string) string {
	return fmt.Sprintf("VM is locked (%s)", lock)
}

// flockText is a worker or config write giving up on the config file's flock, which a clone
// holds for its whole run.
func flockText(vmid int) string {
	return fmt.Sprintf("can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout", vmid)
}

func noStorageText(storage string) string {
	return fmt.Sprintf("storage '%s' does not exist", storage)
}

func noVolumeText(volid string) string {
	return fmt.Sprintf("volume '%s' does not exist", volid)
}

// transientText is PVE's own "something went wrong in the daemon" 500: nothing pveflow can
// match, so it is retried.
const transientText = "got no worker upid - start worker failed"

// permErr is raise_perm_exc for a privilege check on path.
func permErr(path string, privs ...string) *pve.APIError {
	return apiErr(http.StatusForbidden, "Permission check failed (%s, %s)", path, strings.Join(privs, "|"))
}
