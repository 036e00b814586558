package applier

import (
	"errors"
	"net/netip"
	"testing"
)

// takerRules is fakeRules with kube-proxy's DNAT left in front: it records
// kube-ipvs0 at the moment FinishTakeover removes it.
type takerRules struct {
	fakeRules
	// read is kube-ipvs0 now.
	read          func() string
	boundAtFinish []string
	err           error
}

func (r *takerRules) FinishTakeover() error {
	r.boundAtFinish = append(r.boundAtFinish, r.read())
	return r.err
}

// TestFinishTakeoverAfterBind: another proxy's DNAT rules (kube-proxy's
// iptables mode) go only after a full sync has bound every VIP, so the
// address is served throughout; a partial sync never removes them; a
// failure is the sync's rules error, and the next full sync tries again.
func TestFinishTakeoverAfterBind(t *testing.T) {
	b := newBed(t, setGuard{})
	tr := &takerRules{}
	tr.read = b.link.String
	b.a.rules = tr
	// newBed's order check reads b.rules.sets: the same fake's.
	b.rules = &tr.fakeRules
	if _, err := b.a.Full(state("ns/a=10.96.0.1"), []netip.Addr{nodeIP}); err != nil {
		t.Fatal(err)
	}
	if len(tr.boundAtFinish) != 1 || tr.boundAtFinish[0] != "10.96.0.1/32\n" {
		t.Fatalf("kube-ipvs0 when the other proxy's rules were removed: %q; want one removal, after 10.96.0.1 was bound", tr.boundAtFinish)
	}
	if _, err := b.a.Partial(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), svcNames("ns/b")...); err != nil {
		t.Fatal(err)
	}
	if len(tr.boundAtFinish) != 1 {
		t.Fatalf("a partial sync removed the other proxy's rules: %q", tr.boundAtFinish)
	}
	tr.err = errors.New("iptables-restore: exit 1")
	res, err := b.a.Full(state("ns/a=10.96.0.1"), []netip.Addr{nodeIP})
	if err != nil || !errors.Is(res.RulesErr, tr.err) || res.Err() == nil {
		t.Fatalf("a failed FinishTakeover: %v, rules error %v, result %v; want the rules error", err, res.RulesErr, res.Err())
	}
}
