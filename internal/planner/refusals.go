package planner

import (
	"slices"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

func compareNames(a, b *model.ServicePortName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return strings.Compare(a.Port, b.Port)
}

// SortRefusals sorts refusals by service, field, address, reason and
// message, and drops duplicates, in place.
func SortRefusals(rs []model.Refusal) []model.Refusal {
	slices.SortFunc(rs, compareRefusals)
	return slices.Compact(rs)
}

func compareRefusals(a, b model.Refusal) int {
	if c := strings.Compare(a.Service, b.Service); c != 0 {
		return c
	}
	if c := strings.Compare(a.Field, b.Field); c != 0 {
		return c
	}
	if c := strings.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Reason), string(b.Reason)); c != 0 {
		return c
	}
	return strings.Compare(a.Message, b.Message)
}
