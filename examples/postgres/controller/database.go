// Package controller is the Database reconciler: it makes a PostgreSQL
// database, the role owning it and a Secret with the credentials match a
// Database object, puts back what someone changed in the server by hand
// (drift), and drops both when the Database is deleted. It is written as
// for a controller-runtime manager; opzero runs it classic or serverless.
//
// Passwords: generated here, kept only in the Secret, sent to PostgreSQL
// in ALTER/CREATE ROLE and compared with the stored SCRAM verifier; no
// error, log line, Event or status field carries one.
package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/jackc/pgx/v5"

	v1alpha1 "github.com/opzero/opzero/examples/postgres/api/v1alpha1"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/reconcileutil"
)

// What the reconciler needs beyond the kinds it is built with (`opzero
// manifests` adds those: Databases and their status and finalizers,
// Secrets to read, Events): it writes the credentials Secrets.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch

// Finalizer keeps a Database until its database and role are dropped.
const Finalizer = "postgres.example.opzero.dev/drop"

// DatabaseReconciler reconciles Databases against one PostgreSQL server.
type DatabaseReconciler struct {
	client.Client
	Recorder recorder.EventRecorder
	Server   *Server
}

// Reconcile: a bad name is reported and nothing else happens; a deleted
// Database's database and role are dropped; otherwise the Secret, the role,
// the database and its extensions are made as the spec says.
func (r *DatabaseReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	db := &v1alpha1.Database{}
	if err := r.Get(ctx, req.NamespacedName, db); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	name := DatabaseNameFor(db.Spec.DatabaseName, db.Name)
	inUse := db.Status.DatabaseName // what earlier reconciles made, if any
	if inUse == "" {
		inUse = name
	}
	marker := "managed by the Kubernetes Database " + db.Namespace + "/" + db.Name + " (uid " + string(db.UID) + ")"
	deleting, err := reconcileutil.HandleDeletion(ctx, r.Client, db, Finalizer, func(ctx context.Context) error {
		if CheckName(inUse) != nil {
			return nil // nothing was made under a name the operator refuses
		}
		return r.drop(ctx, db, inUse, marker)
	})
	if deleting || err != nil {
		return reconcile.Result{}, err
	}
	if err := CheckName(name); err != nil {
		return reconcile.Result{}, r.refuse(ctx, db, "InvalidName", "PostgreSQL would refuse or misread the database name: "+err.Error()+"; set spec.databaseName")
	}
	if name != inUse {
		return reconcile.Result{}, r.refuse(ctx, db, "NameChanged", fmt.Sprintf("the database is %s and cannot be renamed to %s by this Database: set spec.databaseName back, or create another Database", inUse, name))
	}
	if exts := slices.DeleteFunc(slices.Clone(db.Spec.Extensions), func(e string) bool { return CheckName(e) == nil || reserved[e] }); len(exts) > 0 {
		return reconcile.Result{}, r.refuse(ctx, db, "InvalidExtension", fmt.Sprintf("extension names %q are not PostgreSQL identifiers (a-z, 0-9, _)", exts))
	}

	rl, err := r.Server.readRole(ctx, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	d, err := r.Server.readDatabase(ctx, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if (rl.exists && rl.comment != marker) || (d.exists && d.comment != marker) {
		return reconcile.Result{}, r.refuse(ctx, db, "NameTaken", fmt.Sprintf("PostgreSQL already has a database or role %q that this Database did not create: choose another spec.databaseName (nothing was changed)", name))
	}
	secretName := db.Spec.SecretName
	if secretName == "" {
		secretName = db.Name + "-credentials"
	}
	sec := &corev1.Secret{}
	err = r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: secretName}, sec)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("reading Secret %s: %w", secretName, err)
	}
	if err == nil && !metav1.IsControlledBy(sec, db) {
		return reconcile.Result{}, r.refuse(ctx, db, "SecretTaken", fmt.Sprintf("Secret %s exists and is not this Database's: set spec.secretName to another name (nothing was changed)", secretName))
	}
	if _, err := reconcileutil.EnsureFinalizer(ctx, r.Client, db, Finalizer); err != nil {
		return reconcile.Result{}, err
	}
	password, secretDone, err := r.ensureSecret(ctx, db, secretName, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	done := secretDone
	did, err := r.ensureRole(ctx, name, password, marker, rl)
	if err != nil {
		return reconcile.Result{}, err
	}
	done = append(done, did...)
	if did, err = r.ensureDatabase(ctx, db, name, marker, d); err != nil {
		return reconcile.Result{}, err
	}
	done = append(done, did...)
	exts, unavailable, did, err := r.ensureExtensions(ctx, db, name, !d.exists)
	if err != nil {
		return reconcile.Result{}, err
	}
	done = append(done, did...)
	return reconcile.Result{}, r.report(ctx, db, name, secretName, exts, unavailable, done)
}

// report writes the status and an Event saying what changed: "Updated"
// when the spec changed since the last reconcile, "Healed" when the server
// or the Secret had drifted from an unchanged spec.
func (r *DatabaseReconciler) report(ctx context.Context, db *v1alpha1.Database, name, secretName string, exts, unavailable, done []string) error {
	first := db.Status.DatabaseName == ""
	specChanged := db.Status.ObservedGeneration != db.Generation
	healed := len(done) > 0 && !first && !specChanged
	if len(done) > 0 {
		reason := "Updated"
		switch {
		case first:
			reason = "Created"
		case healed:
			reason = "Healed"
		}
		log.FromContext(ctx).Info(strings.ToLower(reason), "database", name, "changes", done)
		r.Recorder.Eventf(db, nil, corev1.EventTypeNormal, reason, reason, "%s", strings.Join(done, "; "))
	}
	if len(unavailable) > 0 {
		r.Recorder.Eventf(db, nil, corev1.EventTypeWarning, "ExtensionUnavailable", "CreateExtension",
			"PostgreSQL cannot install extensions %q (not in pg_available_extensions): install their packages on the server or remove them from spec.extensions", unavailable)
	}
	now := metav1.Now()
	return reconcileutil.UpdateStatus(ctx, r.Client, db, func() error {
		s := &db.Status
		s.ObservedGeneration = db.Generation
		s.DatabaseName, s.SecretName, s.Extensions = name, secretName, exts
		if healed {
			s.Heals++
			s.LastHealTime = &now
		}
		if len(unavailable) > 0 {
			reconcileutil.SetReady(&s.Conditions, db.Generation, metav1.ConditionFalse, "ExtensionUnavailable",
				fmt.Sprintf("database %s and role %s are ready, but PostgreSQL cannot install extensions %q", name, name, unavailable))
			return nil
		}
		reconcileutil.SetReady(&s.Conditions, db.Generation, metav1.ConditionTrue, "Ready",
			fmt.Sprintf("database %s, its owner role %s and Secret %s match the spec", name, name, secretName))
		return nil
	})
}

// refuse reports a Database the operator will not act on: Ready=False with
// the reason, a Warning Event, and no retry (a spec change brings it back).
func (r *DatabaseReconciler) refuse(ctx context.Context, db *v1alpha1.Database, reason, msg string) error {
	log.FromContext(ctx).Info("refused", "reason", reason, "message", msg)
	r.Recorder.Eventf(db, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
	return reconcileutil.UpdateStatus(ctx, r.Client, db, func() error {
		db.Status.ObservedGeneration = db.Generation
		reconcileutil.SetReady(&db.Status.Conditions, db.Generation, metav1.ConditionFalse, reason, msg)
		return nil
	})
}

// ensureSecret returns the password, creating the Secret (owned by db)
// with a new one when missing, and correcting its other keys.
func (r *DatabaseReconciler) ensureSecret(ctx context.Context, db *v1alpha1.Database, secretName, name string) (string, []string, error) {
	sec := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: secretName}, sec)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", nil, fmt.Errorf("reading Secret %s: %w", secretName, err)
	}
	exists := err == nil
	if exists && !metav1.IsControlledBy(sec, db) { // read again since Reconcile checked: taken meanwhile
		return "", nil, fmt.Errorf("Secret %s/%s exists and is not this Database's", db.Namespace, secretName)
	}
	password := string(sec.Data["password"])
	var done []string
	if password == "" {
		password = newPassword()
		if exists {
			done = append(done, "Secret "+secretName+" had no password: set a new one")
		}
	}
	want := map[string][]byte{
		"host": []byte(r.Server.Host), "port": []byte(strconv.Itoa(r.Server.Port)), "user": []byte(name),
		"password": []byte(password), "database": []byte(name), "uri": []byte(r.Server.URI(name, password, name)),
	}
	if exists {
		changed := false
		for k, v := range want {
			if string(sec.Data[k]) != string(v) {
				changed = true
			}
		}
		if !changed {
			return password, nil, nil
		}
		sec.Data = want
		if err := r.Update(ctx, sec); err != nil {
			return "", nil, fmt.Errorf("updating Secret %s: %w", secretName, err)
		}
		if len(done) == 0 {
			done = append(done, "Secret "+secretName+" corrected")
		}
		return password, done, nil
	}
	sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: secretName}, Type: corev1.SecretTypeOpaque, Data: want}
	if err := controllerutil.SetControllerReference(db, sec, r.Scheme()); err != nil {
		return "", nil, err
	}
	if err := r.Create(ctx, sec); err != nil {
		return "", nil, fmt.Errorf("creating Secret %s: %w", secretName, err)
	}
	return password, append(done, "Secret "+secretName+" created"), nil
}

func newPassword() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ensureRole creates the role, or gives back LOGIN, takes SUPERUSER away
// and resets the password when they differ.
func (r *DatabaseReconciler) ensureRole(ctx context.Context, name, password, marker string, rl role) ([]string, error) {
	q := r.Server.pool
	if !rl.exists {
		if err := exec(ctx, q, "creating role "+name, "CREATE ROLE "+quoteIdent(name)+" LOGIN NOSUPERUSER PASSWORD "+quoteLiteral(password)); err != nil {
			return nil, err
		}
		if err := exec(ctx, q, "commenting role "+name, "COMMENT ON ROLE "+quoteIdent(name)+" IS "+quoteLiteral(marker)); err != nil {
			return nil, err
		}
		return []string{"role " + name + " created"}, nil
	}
	var done []string
	if !rl.canLogin || rl.superuser {
		if err := exec(ctx, q, "altering role "+name, "ALTER ROLE "+quoteIdent(name)+" LOGIN NOSUPERUSER"); err != nil {
			return nil, err
		}
		done = append(done, "role "+name+" given LOGIN and NOSUPERUSER back")
	}
	if !passwordMatches(rl.verifier, name, password) {
		if err := exec(ctx, q, "setting the password of role "+name, "ALTER ROLE "+quoteIdent(name)+" PASSWORD "+quoteLiteral(password)); err != nil {
			return nil, err
		}
		done = append(done, "role "+name+"'s password set to the Secret's")
	}
	return done, nil
}

// ensureDatabase creates the database owned by the role, or gives it back
// its owner and connection limit.
func (r *DatabaseReconciler) ensureDatabase(ctx context.Context, db *v1alpha1.Database, name, marker string, d database) ([]string, error) {
	q, id := r.Server.pool, quoteIdent(name)
	limit := db.Spec.ConnectionLimit
	if !d.exists {
		if err := exec(ctx, q, "creating database "+name, fmt.Sprintf("CREATE DATABASE %s OWNER %s CONNECTION LIMIT %d", id, id, limit)); err != nil {
			return nil, err
		}
		if err := exec(ctx, q, "commenting database "+name, "COMMENT ON DATABASE "+id+" IS "+quoteLiteral(marker)); err != nil {
			return nil, err
		}
		return []string{"database " + name + " created"}, nil
	}
	var done []string
	if d.owner != name {
		if err := exec(ctx, q, "giving database "+name+" back to its role", "ALTER DATABASE "+id+" OWNER TO "+id); err != nil {
			return nil, err
		}
		done = append(done, fmt.Sprintf("database %s owner %s set back to %s", name, d.owner, name))
	}
	if d.connLimit != limit {
		if err := exec(ctx, q, "setting the connection limit of "+name, fmt.Sprintf("ALTER DATABASE %s CONNECTION LIMIT %d", id, limit)); err != nil {
			return nil, err
		}
		done = append(done, fmt.Sprintf("database %s connection limit %d set to %d", name, d.connLimit, limit))
	}
	return done, nil
}

// ensureExtensions creates the spec's extensions the server can install
// and drops those the operator created earlier that left the spec. It
// returns the extensions it keeps and those the server cannot install.
//
// Planned (`opzero plan`) for a database this reconcile creates, it does
// not connect: the database is not there, its CREATE was skipped. It
// returns the spec's extensions as created (whether the server can
// install them is known only once the database exists).
func (r *DatabaseReconciler) ensureExtensions(ctx context.Context, db *v1alpha1.Database, name string, creating bool) (keep, unavailable, done []string, err error) {
	if len(db.Spec.Extensions) == 0 && len(db.Status.Extensions) == 0 {
		return nil, nil, nil, nil
	}
	if creating && operator.Planning(ctx) {
		for _, e := range db.Spec.Extensions {
			keep = append(keep, e)
			done = append(done, "extension "+e+" created in "+name)
		}
		slices.Sort(keep)
		return keep, nil, done, nil
	}
	err = r.Server.inDatabase(ctx, name, func(conn *pgx.Conn) error {
		installed, unavail, err := extensions(ctx, conn, db.Spec.Extensions)
		if err != nil {
			return err
		}
		unavailable = unavail
		for _, e := range db.Spec.Extensions {
			if slices.Contains(unavail, e) {
				continue
			}
			keep = append(keep, e)
			if slices.Contains(installed, e) {
				continue
			}
			if err := exec(ctx, conn, "creating extension "+e+" in "+name, "CREATE EXTENSION IF NOT EXISTS "+quoteIdent(e)); err != nil {
				return err
			}
			done = append(done, "extension "+e+" created in "+name)
		}
		for _, e := range db.Status.Extensions {
			if slices.Contains(db.Spec.Extensions, e) || !slices.Contains(installed, e) {
				continue
			}
			if err := exec(ctx, conn, "dropping extension "+e+" from "+name, "DROP EXTENSION IF EXISTS "+quoteIdent(e)); err != nil {
				return err
			}
			done = append(done, "extension "+e+" dropped from "+name)
		}
		return nil
	})
	slices.Sort(keep)
	return keep, unavailable, done, err
}

// drop removes the database (ending its sessions) and the role, if this
// Database made them; the Secret goes with the Database (owner reference).
func (r *DatabaseReconciler) drop(ctx context.Context, db *v1alpha1.Database, name, marker string) error {
	d, err := r.Server.readDatabase(ctx, name)
	if err != nil {
		return err
	}
	if d.exists && d.comment == marker {
		if err := exec(ctx, r.Server.pool, "dropping database "+name, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)"); err != nil {
			return err
		}
	}
	rl, err := r.Server.readRole(ctx, name)
	if err != nil {
		return err
	}
	if rl.exists && rl.comment == marker {
		if err := exec(ctx, r.Server.pool, "dropping role "+name, "DROP ROLE IF EXISTS "+quoteIdent(name)); err != nil {
			return err
		}
	}
	log.FromContext(ctx).Info("dropped", "database", name)
	r.Recorder.Eventf(db, nil, corev1.EventTypeNormal, "Dropped", "Drop", "database %s and role %s dropped", name, name)
	return nil
}
