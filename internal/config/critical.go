package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrServiceName is a --critical-services entry that is not NAMESPACE/NAME.
var ErrServiceName = errors.New("not NAMESPACE/NAME")

func (c *Config) addCriticalFlag(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.CriticalServices, "critical-services", c.CriticalServices, "Services (NAMESPACE/NAME) the first sync after a start programs before all others, after default/kubernetes, which always goes first; empty means the cluster DNS: the Services in kube-system labelled k8s-app=kube-dns.")
}

// ParseServiceNames parses NAMESPACE/NAME entries (--critical-services),
// each part a valid DNS-1123 label.
func ParseServiceNames(entries []string) ([]types.NamespacedName, error) {
	var out []types.NamespacedName
	var errs []error
	for _, e := range entries {
		ns, name, ok := strings.Cut(e, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Label(name)) > 0 {
			errs = append(errs, fmt.Errorf("%q: %w", e, ErrServiceName))
			continue
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: name})
	}
	return out, errors.Join(errs...)
}
