package kernel

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Release is `uname -r`: the running kernel's release, which decides the
// IPVS sysctls (ipvs.KernelSysctls).
func Release() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}
