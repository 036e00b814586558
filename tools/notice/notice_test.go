package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoticeIsCurrent renders NOTICE from go.mod as `go run ./tools/notice`
// does and requires the committed file to be the same: a module added,
// removed or upgraded in go.mod without regenerating NOTICE fails it.
func TestNoticeIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	mods, err := linkedModules(root, mainPackage, platforms)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) == 0 {
		t.Fatalf("go list found no module linked into %s", mainPackage)
	}
	want, err := render(mods)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, noticeFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) == want {
		return
	}
	gotLines := lineSet(string(got))
	for _, l := range strings.Split(want, "\n") {
		if !gotLines[l] {
			t.Errorf("NOTICE lacks %q", l)
		}
	}
	wantLines := lineSet(want)
	for _, l := range strings.Split(string(got), "\n") {
		if !wantLines[l] {
			t.Errorf("NOTICE has %q, which go.mod no longer links", l)
		}
	}
	t.Errorf("NOTICE is out of date with go.mod: run go run ./tools/notice")
}

func lineSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		m[l] = true
	}
	return m
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"apache", "Apache License\n   Version 2.0, January 2004", "Apache-2.0"},
		{"mit", "Permission is hereby granted, free of charge,\nto any person", "MIT"},
		{"bsd3", "Redistribution and use in source and binary forms ... Neither the name of Google", "BSD-3-Clause"},
		{"bsd2", "Redistribution and use in source and binary forms, with or without", "BSD-2-Clause"},
		{"two", "Permission is hereby granted, free of charge ... Licensed under the Apache License, Version 2.0", "Apache-2.0 AND MIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := classify(tc.text)
			if err != nil || got != tc.want {
				t.Errorf("classify = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := classify("All rights reserved."); !errors.Is(err, ErrUnknownLicence) {
		t.Errorf("classify of an unknown text: %v, want ErrUnknownLicence", err)
	}
}
