// The core's state names, from /ui/enums.json (built by the node from the core's Enum
// classes). No module holds a copy of a value: they name members (`E.WorkerState.ACTIVE`),
// and a table keyed by member names (`kinds`) fails loudly when the core has no such member,
// so a renamed or removed state shows as an error in the page rather than a wrong colour.

import { getJSON, errorText } from "./api.js";

// The vocabulary the page uses: `E` (enum -> {NAME: value}, in declared order), the
// migration phases no command leaves, each change reason's sentence, and the steps drawn.
export async function loadEnums() {
  const r = await getJSON("/ui/enums.json");
  if (!r.ok || !r.body || !r.body.enums) throw new Error(`enums.json: ${errorText(r)}`);
  const doc = r.body;
  const E = doc.enums;
  const finished = new Set(doc.migration_finished);
  // A migration's steps: every phase it goes through on the way to DONE, in order.
  const migrationSteps = Object.values(E.MigrationPhase)
    .filter((v) => v === E.MigrationPhase.DONE || !finished.has(v));
  return {
    E,
    finished,
    reasonText: doc.reason_text,
    migrationSteps,
    // An operator may abort a migration until its target owns the partition.
    abortable: new Set(migrationSteps.slice(0, migrationSteps.indexOf(E.MigrationPhase.HANDED_OFF))),
    rescaleSteps: Object.values(E.RescalePhase),
  };
}

const resolved = new WeakMap(); // table -> {value: kind}, built once per table

// `table` maps member names of `members` (one enum of `E`) to anything; the answer maps
// their values to the same. A name the enum lacks throws.
export function kinds(members, table) {
  let byValue = resolved.get(table);
  if (byValue === undefined) {
    byValue = {};
    for (const [name, kind] of Object.entries(table)) {
      if (!Object.hasOwn(members, name)) throw new Error(`the core has no state ${name}`);
      byValue[members[name]] = kind;
    }
    resolved.set(table, byValue);
  }
  return byValue;
}

// True for a migration that has ended (done or aborted).
export function isFinished(enums, migration) {
  return enums.finished.has(migration.phase);
}
