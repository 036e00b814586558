package vmtest

import (
	"bytes"
	"fmt"
	"io"
)

// cpioWriter writes an initramfs in the kernel's "newc" cpio format
// (`cpio -o -H newc`), the only format the kernel unpacks.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

// File modes used in the archive (S_IF* | permissions).
const (
	modeDir     = 0o040755
	modeExec    = 0o100755
	modeFile    = 0o100644
	modeSymlink = 0o120777
	modeCharDev = 0o020600
)

func (c *cpioWriter) entry(name string, mode uint32, data []byte, rdevMajor, rdevMinor int) {
	if c.err != nil {
		return
	}
	c.ino++
	var b bytes.Buffer
	fmt.Fprintf(&b, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	b.WriteString(name)
	b.WriteByte(0)
	pad(&b)
	b.Write(data)
	pad(&b)
	_, c.err = c.w.Write(b.Bytes())
}

func pad(b *bytes.Buffer) {
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string) { c.entry(name, modeDir, nil, 0, 0) }

// File adds a regular file with the given mode (modeExec or modeFile).
func (c *cpioWriter) File(name string, mode uint32, data []byte) { c.entry(name, mode, data, 0, 0) }

// CharDev adds a character device node, e.g. /dev/console (5, 1).
func (c *cpioWriter) CharDev(name string, major, minor int) {
	c.entry(name, modeCharDev, nil, major, minor)
}

// Close writes the trailer and returns the first error.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	return c.err
}
