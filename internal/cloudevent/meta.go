package cloudevent

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Meta is the part of an object the engine decides on before any reconcile:
// parsed once, without a scheme, from the event's JSON.
type Meta struct {
	APIVersion      string
	Kind            string
	Namespace       string
	Name            string
	UID             string
	ResourceVersion string
	Generation      int64
	Deleting        bool
	Finalizers      []string
	Labels          map[string]string
	Annotations     map[string]string
	// Controller is the owner reference with controller: true, if any.
	Controller *OwnerRef
	// ObservedGeneration is status.observedGeneration; HasObserved says
	// whether the object has one.
	ObservedGeneration int64
	HasObserved        bool
}

// OwnerRef is the controller owner of an object.
type OwnerRef struct {
	APIVersion, Kind, Name, UID string
}

// RefMeta is what a Reference-mode event of the opzero hub carries of the
// object's metadata (the "metadata" beside the reference), as the
// object's own metadata spells it.
type RefMeta struct {
	UID             string            `json:"uid,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	OwnerReferences []RefOwner        `json:"ownerReferences,omitempty"`
}

// RefOwner is an owner reference of RefMeta.
type RefOwner struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

// ControllerRef is r's owner reference with controller: true, if any.
func (r *RefMeta) ControllerRef() *OwnerRef {
	for _, o := range r.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return &OwnerRef{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID}
		}
	}
	return nil
}

type wireMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Namespace         string            `json:"namespace"`
		Name              string            `json:"name"`
		UID               string            `json:"uid"`
		ResourceVersion   string            `json:"resourceVersion"`
		Generation        int64             `json:"generation"`
		DeletionTimestamp *string           `json:"deletionTimestamp"`
		Finalizers        []string          `json:"finalizers"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		OwnerReferences   []struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
			UID        string `json:"uid"`
			Controller *bool  `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Status *struct {
		ObservedGeneration *int64 `json:"observedGeneration"`
	} `json:"status"`
}

// ParseMeta reads Meta from an object's JSON.
func ParseMeta(data []byte) (*Meta, error) {
	if len(data) == 0 {
		return nil, errors.New("the event carries no object (Resource mode sends the whole object as data)")
	}
	var w wireMeta
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("the event's data is not a JSON object: %w", err)
	}
	if w.Kind == "" || w.APIVersion == "" || w.Metadata.Name == "" {
		return nil, errors.New("the event's data is not a Kubernetes object (apiVersion, kind and metadata.name are required)")
	}
	md := &w.Metadata
	m := &Meta{
		APIVersion: w.APIVersion, Kind: w.Kind, Namespace: md.Namespace, Name: md.Name, UID: md.UID,
		ResourceVersion: md.ResourceVersion, Generation: md.Generation, Deleting: md.DeletionTimestamp != nil,
		Finalizers: md.Finalizers, Labels: md.Labels, Annotations: md.Annotations,
	}
	for _, o := range md.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			m.Controller = &OwnerRef{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID}
			break
		}
	}
	if w.Status != nil && w.Status.ObservedGeneration != nil {
		m.ObservedGeneration, m.HasObserved = *w.Status.ObservedGeneration, true
	}
	return m, nil
}
