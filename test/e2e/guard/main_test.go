package guard_test

import (
	"os"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

func TestMain(m *testing.M) { os.Exit(apiserver.RunMain(m)) }
