package model

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// The one order of service ports and refusals: conversion sorts in it,
// the planner resolves conflicts and prints in it, tests check it.

// CompareServices orders Services by namespace, then name (-1, 0, +1).
func CompareServices(a, b types.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// Compare orders service port names by namespace, name and port name
// (-1, 0, +1).
func (n ServicePortName) Compare(o ServicePortName) int {
	if c := CompareServices(n.NamespacedName, o.NamespacedName); c != 0 {
		return c
	}
	return strings.Compare(n.Port, o.Port)
}

// Compare orders refusals by subject (as its text reads), field, address,
// reason and message (-1, 0, +1): the order `plan` prints them in.
func (r Refusal) Compare(o Refusal) int {
	if c := r.Subject.Compare(o.Subject); c != 0 {
		return c
	}
	if c := strings.Compare(r.Field, o.Field); c != 0 {
		return c
	}
	if c := strings.Compare(r.Address, o.Address); c != 0 {
		return c
	}
	if c := strings.Compare(string(r.Reason), string(o.Reason)); c != 0 {
		return c
	}
	return strings.Compare(r.Message, o.Message)
}
