package bucket

import "hash/fnv"

// Of is the bucket of key among n: rendezvous (highest random weight)
// hashing, a consistent hash as knative/pkg's BucketSet: when n grows, a
// key moves only to one of the new buckets. Every replica must compute the
// same answer, so the function is part of the protocol between hub
// versions: do not change it.
func Of(key string, n int) int {
	if n <= 1 {
		return 0
	}
	f := fnv.New64a()
	_, _ = f.Write([]byte(key))
	h := f.Sum64()
	best, bestScore := 0, uint64(0)
	for i := 0; i < n; i++ {
		if s := mix(h ^ mix(uint64(i)+1)); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// mix is splitmix64's finalizer: FNV's low bits alone spread keys that
// differ in their last byte poorly.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
