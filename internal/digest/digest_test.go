package digest

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestSetOrderAndDifference: a Set is the same whatever order its
// elements are added in, and differs when one element differs in any bit
// or one is left out, over random sets.
func TestSetOrderAndDifference(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := 1 + rnd.IntN(20)
		xs, ys := make([]uint64, n), make([]uint64, n)
		var fwd, back Set
		for i := range n {
			xs[i], ys[i] = rnd.Uint64(), rnd.Uint64()
			fwd.Add(xs[i], ys[i])
		}
		for i := n - 1; i >= 0; i-- {
			back.Add(xs[i], ys[i])
		}
		if fwd != back {
			t.Fatal("the order of adding changed the digest")
		}
		var flipped, fewer Set
		k, bit := rnd.IntN(n), uint(rnd.IntN(128))
		for i := range n {
			x, y := xs[i], ys[i]
			if i == k {
				if bit < 64 {
					x ^= 1 << bit
				} else {
					y ^= 1 << (bit - 64)
				}
			}
			flipped.Add(x, y)
			if i != k {
				fewer.Add(xs[i], ys[i])
			}
		}
		if flipped == fwd || fewer == fwd {
			t.Fatalf("a flipped bit %d of element %d, or the element left out, gave the same digest", bit, k)
		}
	}
}

// TestAddr: IPv4, the same address mapped into IPv6, and the zero Addr
// are three different words.
func TestAddr(t *testing.T) {
	seen := map[[2]uint64]netip.Addr{}
	for _, a := range []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.1"), {}, netip.MustParseAddr("::")} {
		hi, lo := Addr(a)
		if b, ok := seen[[2]uint64{hi, lo}]; ok {
			t.Errorf("%v and %v give the same words", a, b)
		}
		seen[[2]uint64{hi, lo}] = a
	}
}
