package ipvs

import "github.com/ipvs-proxy/ipvs-proxy/internal/digest"

// Digest is a virtual server as a full sync compares it: its scheduler,
// flags and persistence as sameService sees them, and its real servers at
// their weights in any order, as sameRealServers does, in 128 bits
// (internal/digest). Two virtual servers the full sync takes for the same
// have the same Digest; two it tells apart differ in it but for a chance
// of about 2⁻¹²⁸ per comparison. A full sync's read compares the table
// with the mirror as digests while it reads (Dump), so that neither holds
// the whole table nor the loop walks it.
type Digest = digest.Set

// digestOf is vs's Digest.
func digestOf(vs *VirtualServer) Digest {
	flags := uint64(vs.Flags &^ FlagHashed)
	var timeout uint64
	if vs.Flags&FlagPersistent != 0 {
		timeout = uint64(vs.PersistenceTimeout)
	}
	var d Digest
	// The service's attributes are one more element.
	d.Add(digest.String(vs.Scheduler), flags<<32|timeout)
	for i := range vs.RealServers {
		rs := &vs.RealServers[i]
		hi, lo := digest.Addr(rs.Address)
		d.Add(digest.Mix(hi, lo), uint64(rs.Port)<<32|uint64(uint32(rs.Weight)))
	}
	return d
}
