package takeover

import "testing"

func TestProcCounters(t *testing.T) {
	text := `TcpExt: SyncookiesSent ListenOverflows ListenDrops PAWSEstab TCPTimeWaitOverflow
TcpExt: 0 3 3 1 0
IpExt: InNoRoutes InTruncatedPkts
IpExt: 0 0
Tcp: RtoAlgorithm RtoMin ActiveOpens AttemptFails EstabResets InErrs OutRsts
Tcp: 1 200 40 2 0 0 5
`
	c := procCounters(text)
	for name, want := range map[string]int64{"TcpExtListenOverflows": 3, "TcpExtPAWSEstab": 1, "TcpAttemptFails": 2, "TcpOutRsts": 5, "IpExtInNoRoutes": 0} {
		if got, ok := c[name]; !ok || got != want {
			t.Errorf("%s = %d (%v), want %d", name, got, ok, want)
		}
	}
	for name, want := range map[string]bool{"TcpExtListenOverflows": true, "TcpExtPAWSEstab": true, "TcpOutRsts": true, "TcpActiveOpens": false, "IpExtInNoRoutes": false, "TcpRtoMin": false} {
		if got := dropCounter(name); got != want {
			t.Errorf("dropCounter(%s) = %v, want %v", name, got, want)
		}
	}
}
