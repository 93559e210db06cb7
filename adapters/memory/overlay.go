package memory

import "maps"

// layer is one relation of the Store as seen by a transaction: the
// committed map (read-only while the transaction runs) plus the
// transaction's own writes. Committing applies the writes to the committed
// map; discarding the layer rolls them back.
type layer[K comparable, V any] struct {
	base map[K]V
	puts map[K]V
	dels map[K]struct{}
}

func newLayer[K comparable, V any](base map[K]V) *layer[K, V] {
	return &layer[K, V]{base: base}
}

func (l *layer[K, V]) get(k K) (V, bool) {
	if _, gone := l.dels[k]; gone {
		var zero V
		return zero, false
	}
	if v, ok := l.puts[k]; ok {
		return v, true
	}
	v, ok := l.base[k]
	return v, ok
}

func (l *layer[K, V]) has(k K) bool {
	_, ok := l.get(k)
	return ok
}

func (l *layer[K, V]) put(k K, v V) {
	if l.puts == nil {
		l.puts = map[K]V{}
	}
	delete(l.dels, k)
	l.puts[k] = v
}

func (l *layer[K, V]) del(k K) {
	delete(l.puts, k)
	if _, ok := l.base[k]; ok {
		if l.dels == nil {
			l.dels = map[K]struct{}{}
		}
		l.dels[k] = struct{}{}
	}
}

// each calls fn for every visible entry, in no particular order, until fn
// returns false.
func (l *layer[K, V]) each(fn func(K, V) bool) {
	for k, v := range l.puts {
		if !fn(k, v) {
			return
		}
	}
	for k, v := range l.base {
		if _, gone := l.dels[k]; gone {
			continue
		}
		if _, shadowed := l.puts[k]; shadowed {
			continue
		}
		if !fn(k, v) {
			return
		}
	}
}

// commit applies the writes to the committed map.
func (l *layer[K, V]) commit() {
	for k := range l.dels {
		delete(l.base, k)
	}
	maps.Copy(l.base, l.puts)
}
