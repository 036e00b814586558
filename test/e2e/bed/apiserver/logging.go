package apiserver

import (
	"flag"
	"io"
	"os"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/grpclog"
	"k8s.io/klog/v2"
)

// logEnv names the environment variable that, when non-empty, keeps the
// kube-apiserver, etcd and gRPC logs on stderr.
const logEnv = "IPVS_E2E_APISERVER_LOG"

// verbose reports whether server logs are wanted.
func verbose() bool { return os.Getenv(logEnv) != "" }

// logOutput is where server logs go.
func logOutput() io.Writer {
	if verbose() {
		return os.Stderr
	}
	return io.Discard
}

// init quiets klog and gRPC before any server starts. k8s.io/kubernetes's
// ktesting raises klog's -v to 5 in its own init; undo that, and route klog
// to nothing unless IPVS_E2E_APISERVER_LOG is set.
func init() {
	if f := flag.CommandLine.Lookup("v"); f != nil {
		_ = f.Value.Set("0")
	}
	if !verbose() {
		klog.SetLogger(logr.Discard())
		grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	}
}
