//go:build !linux

package trim

func dropImage() {}

func evictImage() {}
