package callshares

import "time"

// RenewCallShareAt is what the renew Update of a CallShares workflow in state st answers at now.
func RenewCallShareAt(st *CallSharesState, req CallShareRequest, now time.Time) CallShareGrant {
	c := &callShares{st: *st}
	g := c.renewAt(req, now)
	*st = c.st
	return g
}
