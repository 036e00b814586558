// Package image holds the files the container image adds to Debian
// (iptables-wrapper) and the tests that prove them. It has no Go code of its
// own; the tests run the shell script against fake iptables backends and
// never touch the real netfilter tables.
package image
