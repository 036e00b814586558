package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrUnknownLicence is returned for a module whose licence files match no
// licence this tool knows: a human must read it before it ships.
var ErrUnknownLicence = errors.New("no known licence")

// licenceFile matches the names under which modules ship their licence
// texts (LICENSE, LICENSE.txt, LICENSE.libyaml, COPYING, ...).
var licenceFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying)([.-].*)?$`)

// A licence is recognised by phrases of its own text; the SPDX identifiers
// of every licence a module's files contain are listed, in this order.
var licences = []struct {
	id    string
	match func(text string) bool
}{
	{"Apache-2.0", func(t string) bool {
		return strings.Contains(t, "apache license") && strings.Contains(t, "version 2.0")
	}},
	{"MIT", func(t string) bool { return strings.Contains(t, "permission is hereby granted, free of charge") }},
	{"BSD-3-Clause", func(t string) bool { return bsd(t) && neitherTheName(t) }},
	{"BSD-2-Clause", func(t string) bool { return bsd(t) && !neitherTheName(t) }},
	{"ISC", func(t string) bool {
		return strings.Contains(t, "permission to use, copy, modify, and/or distribute this software for any purpose")
	}},
	{"MPL-2.0", func(t string) bool { return strings.Contains(t, "mozilla public license version 2.0") }},
}

func bsd(t string) bool {
	return strings.Contains(t, "redistribution and use in source and binary forms")
}

func neitherTheName(t string) bool {
	return strings.Contains(t, "neither the name") || strings.Contains(t, "names of its contributors may")
}

// moduleLicence returns the SPDX expression of the licence files in dir.
func moduleLicence(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("read module directory: %w", err)
	}
	var text strings.Builder
	for _, e := range entries {
		if e.IsDir() || !licenceFile.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", fmt.Errorf("read licence file: %w", err)
		}
		text.Write(b)
		text.WriteByte('\n')
	}
	return classify(text.String())
}

// classify names the licences text contains, joined with " AND ".
func classify(text string) (string, error) {
	// One space between words, lower case: licence files wrap lines anywhere.
	t := strings.ToLower(strings.Join(strings.Fields(text), " "))
	var ids []string
	for _, l := range licences {
		if l.match(t) {
			ids = append(ids, l.id)
		}
	}
	if len(ids) == 0 {
		return "", ErrUnknownLicence
	}
	return strings.Join(ids, " AND "), nil
}
