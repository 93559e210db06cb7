package postgres

import (
	"cmp"
	"fmt"
	"slices"
)

// claimSet prepares a claim-once insert (inbox, reservation outcomes): it
// rejects empty keys, keeps the first of repeated keys (unique, in input
// order) and returns the same items sorted by key, the insert order that
// makes overlapping claims of concurrent transactions wait for each other
// instead of deadlocking.
func claimSet[T any](what string, items []T, key func(T) string) (unique, sorted []T, err error) {
	seen := make(map[string]bool, len(items))
	unique = make([]T, 0, len(items))
	for _, it := range items {
		k := key(it)
		if k == "" {
			return nil, nil, fmt.Errorf("postgres: %s: empty key", what)
		}
		if !seen[k] {
			seen[k] = true
			unique = append(unique, it)
		}
	}
	sorted = slices.Clone(unique)
	slices.SortFunc(sorted, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return unique, sorted, nil
}

// claimedInOrder returns the keys of unique that the insert returned, in
// input order.
func claimedInOrder[T any](unique []T, key func(T) string, inserted []string) []string {
	got := make(map[string]bool, len(inserted))
	for _, k := range inserted {
		got[k] = true
	}
	claimed := make([]string, 0, len(inserted))
	for _, it := range unique {
		if k := key(it); got[k] {
			claimed = append(claimed, k)
		}
	}
	return claimed
}
