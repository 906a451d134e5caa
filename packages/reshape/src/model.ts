import { STANDARD_RESOURCE_CLASSES } from './vocabulary.js';
import { ReshapeError } from './errors.js';

/** A resource provider: a node of a provider tree. */
export interface ResourceProvider {
  /** The provider's identifier, lower-case with dashes. */
  uuid: string;
  /** The provider's name, unique among providers. */
  name: string;
  /** `null` for a root. */
  parentProviderUuid: string | null;
  /** The root of the provider's tree (its own uuid for a root). */
  rootProviderUuid: string;
  /** Bumped by every change of the provider's inventories, traits or allocations. */
  generation: number;
}

/** The inventory of one resource class on one provider. */
export interface Inventory {
  /** The amount of the resource the provider has, an integer of at least 1. */
  total: number;
  /** @default 0 */
  reserved: number;
  /** @default 1 */
  minUnit: number;
  /** @default 2147483647 */
  maxUnit: number;
  /** @default 1 */
  stepSize: number;
  /** @default 1 */
  allocationRatio: number;
}

/** An inventory as given by callers: everything but `total` has Placement's default. */
export type InventoryInput = Partial<Inventory> & {
  /** The amount of the resource the provider has, an integer of at least 1. */
  total: number;
};

/** Amounts per resource class (`{ VCPU: 2, MEMORY_MB: 512 }`). */
export type Resources = Record<string, number>;

/** A consumer's allocations, keyed by provider uuid. */
export type AllocationMap = Record<string, Resources>;

/** Everything allocated to one consumer. */
export interface ConsumerAllocations {
  /** The project the consumer belongs to. */
  projectId: string;
  /** The user the consumer belongs to. */
  userId: string;
  /** `null` when the consumer does not exist yet (no allocations). */
  consumerGeneration: number | null;
  /** The consumer's type (`INSTANCE`, `MIGRATION`…, Placement 1.38), absent when it has none. */
  consumerType?: string;
  /** The consumer's allocations, per provider uuid. */
  allocations: AllocationMap;
}

/**
 * A replacement of a consumer's allocations. `consumerGeneration` is the generation the caller
 * last saw (`null`: the caller expects the consumer to be new); omit it to skip the check.
 * Empty `allocations` delete the consumer.
 */
export interface AllocationsInput {
  /** The project the consumer belongs to. */
  projectId: string;
  /** The user the consumer belongs to. */
  userId: string;
  /** The consumer generation the caller last saw; `null`: new consumer; omitted: unchecked. */
  consumerGeneration?: number | null;
  /**
   * The consumer's type, `[A-Z0-9_]+` (Placement 1.38: `INSTANCE`, `MIGRATION`…). Omitted: an
   * existing consumer keeps its type, a new one has none (reported as `unknown` over HTTP).
   */
  consumerType?: string;
  /** The new allocations, per provider uuid; empty deletes the consumer. */
  allocations: AllocationMap;
}

/** Usage of one project (or one user of it) summed over its consumers. */
export interface TotalUsages {
  /** Per resource class, over every consumer of the project (and user). */
  usages: Resources;
  /** Consumers with at least one allocation. */
  consumerCount: number;
  /** The same per consumer type; consumers without a type are under `unknown`. */
  byConsumerType: Record<
    string,
    {
      /** Per resource class, over the consumers of this type. */
      usages: Resources;
      /** Consumers of this type with at least one allocation. */
      consumerCount: number;
    }
  >;
}

/** Inventories of one provider with the provider generation they were read at. */
export interface ProviderInventories {
  /** The provider generation the inventories were read at. */
  generation: number;
  /** The inventories, per resource class. */
  inventories: Record<string, Inventory>;
}

/** A replacement of one provider's inventories, checked against `generation`. */
export interface InventoriesInput {
  /** The provider generation the caller last saw; a different one fails the write. */
  generation: number;
  /** The new inventories, per resource class; a class left out is removed. */
  inventories: Record<string, InventoryInput>;
}

/**
 * One atomic write: replaces the inventories of every listed provider and the allocations of
 * every listed consumer, after checking every generation, capacity and unit constraint.
 */
export interface ReshapeRequest {
  /** New inventories, per provider uuid. */
  inventories?: Record<string, InventoriesInput>;
  /** New allocations, per consumer uuid. */
  allocations?: Record<string, AllocationsInput>;
}

/** What a successful write changed. */
export interface ReshapeResult {
  /** New generation of every provider whose inventories or allocations changed. */
  providerGenerations: Record<string, number>;
  /** New generation of every written consumer (`null`: deleted, no allocations left). */
  consumerGenerations: Record<string, number | null>;
}

const STANDARD = new Set(STANDARD_RESOURCE_CLASSES);

export const MAX_INT = 2147483647;
export const CUSTOM_NAME = /^CUSTOM_[A-Z0-9_]+$/;
export const TRAIT_NAME = /^[A-Z][A-Z0-9_]*$/;
const UUID = /^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$/;

/** Whether `name` is one of {@link STANDARD_RESOURCE_CLASSES}. */
export function isStandardResourceClass(name: string): boolean {
  return STANDARD.has(name);
}

/**
 * Capacity of an inventory: (total − reserved) × allocation_ratio in floating point, rounded down,
 * as Placement computes it: 100 × 0.29 holds 28 (the product is 28.999…), not 29.
 */
export function capacityOf(inv: Inventory): number {
  return Math.floor((inv.total - inv.reserved) * inv.allocationRatio);
}

/** Whether `amount` more fits an inventory `used` so far: units, step and capacity allow it. */
export function fitsInventory(inv: Inventory, used: number, amount: number): boolean {
  return (
    amount >= inv.minUnit &&
    amount <= inv.maxUnit &&
    amount % inv.stepSize === 0 &&
    used + amount <= capacityOf(inv)
  );
}

function invalid(message: string, details: Record<string, string | number | null> = {}): never {
  throw new ReshapeError('reshape.invalid_input', message, { details });
}

export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && UUID.test(value);
}

/** Lower-case, dashed form of a uuid (Placement accepts both forms). */
const CANONICAL = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function normalizeUuid(value: string, what = 'uuid'): string {
  if (typeof value === 'string' && value.length === 36 && CANONICAL.test(value)) return value;
  if (!isUuid(value)) invalid(`${what} must be a UUID, got ${JSON.stringify(value)}`);
  const hex = value.replace(/-/g, '').toLowerCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function int(value: unknown, name: string, min: number, max = MAX_INT): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    invalid(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`, {
      field: name,
    });
  }
  return value;
}

/** Fills Placement's defaults and checks every field of an inventory. */
export function normalizeInventory(rc: string, input: InventoryInput): Inventory {
  if (typeof input !== 'object' || input === null) invalid(`inventory of ${rc} must be an object`);
  const total = int(input.total, `${rc}.total`, 1);
  const reserved = int(input.reserved ?? 0, `${rc}.reserved`, 0);
  const minUnit = int(input.minUnit ?? 1, `${rc}.minUnit`, 1);
  const maxUnit = int(input.maxUnit ?? MAX_INT, `${rc}.maxUnit`, 1);
  const stepSize = int(input.stepSize ?? 1, `${rc}.stepSize`, 1);
  const allocationRatio = input.allocationRatio ?? 1;
  // Number.isFinite is false for anything but a finite number.
  if (!Number.isFinite(allocationRatio) || allocationRatio <= 0) {
    invalid(`${rc}.allocationRatio must be a number above 0, got ${String(allocationRatio)}`);
  }
  if (reserved > total)
    invalid(`${rc}: reserved (${reserved}) is above total (${total})`, {
      resourceClass: rc,
      reserved,
      total,
    });
  if (minUnit > maxUnit) invalid(`${rc}: minUnit (${minUnit}) is above maxUnit (${maxUnit})`);
  return { total, reserved, minUnit, maxUnit, stepSize, allocationRatio };
}

export function checkResourceClassName(name: unknown): string {
  if (typeof name !== 'string' || !(STANDARD.has(name) || CUSTOM_NAME.test(name))) {
    invalid(
      `resource class must be a standard class or match ${String(CUSTOM_NAME)}, got ${JSON.stringify(name)}`,
      { resourceClass: typeof name === 'string' ? name : null },
    );
  }
  return name;
}

export function checkName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0 || name.length > 200) {
    invalid(`provider name must be a string of 1 to 200 characters, got ${JSON.stringify(name)}`);
  }
  return name;
}

/** Consumer type names, as Placement's `CONSUMER_TYPE_PATTERN`. */
export const CONSUMER_TYPE_NAME = /^[A-Z0-9_]+$/;

export function checkConsumerType(name: unknown): string {
  if (typeof name !== 'string' || !CONSUMER_TYPE_NAME.test(name) || name.length > 255)
    invalid(`consumer type must match ${String(CONSUMER_TYPE_NAME)}, got ${JSON.stringify(name)}`);
  return name;
}

/** Checks and normalizes a write request (uuids lower-cased, inventories defaulted). */
export function normalizeRequest(req: ReshapeRequest): {
  inventories: Map<string, { generation: number; inventories: Record<string, Inventory> }>;
  allocations: Map<
    string,
    {
      projectId: string;
      userId: string;
      consumerGeneration?: number | null;
      consumerType?: string;
      allocations: Map<string, Map<string, number>>;
    }
  >;
} {
  if (typeof req !== 'object' || req === null) invalid('a reshape request must be an object');
  const inventories = new Map<
    string,
    { generation: number; inventories: Record<string, Inventory> }
  >();
  for (const [rp, input] of Object.entries(req.inventories ?? {})) {
    const uuid = normalizeUuid(rp, 'provider uuid');
    if (typeof input !== 'object' || input === null)
      invalid(`inventories of ${rp} must be an object`);
    const generation = int(input.generation, `generation of ${rp}`, 0);
    const out: Record<string, Inventory> = {};
    for (const [rc, inv] of Object.entries(input.inventories ?? {})) {
      checkResourceClassName(rc);
      out[rc] = normalizeInventory(rc, inv);
    }
    inventories.set(uuid, { generation, inventories: out });
  }
  const allocations = new Map<
    string,
    {
      projectId: string;
      userId: string;
      consumerGeneration?: number | null;
      consumerType?: string;
      allocations: Map<string, Map<string, number>>;
    }
  >();
  for (const [consumer, input] of Object.entries(req.allocations ?? {})) {
    const uuid = normalizeUuid(consumer, 'consumer uuid');
    if (typeof input !== 'object' || input === null)
      invalid(`allocations of ${consumer} must be an object`);
    if (
      typeof input.projectId !== 'string' ||
      input.projectId.length === 0 ||
      input.projectId.length > 255
    )
      invalid(`projectId of consumer ${consumer} must be a non-empty string`);
    if (typeof input.userId !== 'string' || input.userId.length === 0 || input.userId.length > 255)
      invalid(`userId of consumer ${consumer} must be a non-empty string`);
    const gen = input.consumerGeneration;
    if (gen !== undefined && gen !== null) int(gen, `consumerGeneration of ${consumer}`, 0);
    const map = new Map<string, Map<string, number>>();
    if (typeof input.allocations !== 'object' || input.allocations === null)
      invalid(`allocations of consumer ${consumer} must be an object`);
    for (const [rp, resources] of Object.entries(input.allocations)) {
      const rpUuid = normalizeUuid(rp, 'provider uuid');
      if (typeof resources !== 'object' || resources === null)
        invalid(`resources must be an object`);
      const inner = new Map<string, number>();
      for (const [rc, amount] of Object.entries(resources)) {
        checkResourceClassName(rc);
        // The message is built only for a bad amount (this loop runs once per allocation row).
        if (
          typeof amount === 'number' &&
          Number.isInteger(amount) &&
          amount >= 1 &&
          amount <= MAX_INT
        )
          inner.set(rc, amount);
        else inner.set(rc, int(amount, `${rc} amount of consumer ${consumer}`, 1));
      }
      if (inner.size > 0) map.set(rpUuid, inner);
    }
    allocations.set(uuid, {
      projectId: input.projectId,
      userId: input.userId,
      consumerGeneration: gen,
      ...(input.consumerType === undefined
        ? {}
        : { consumerType: checkConsumerType(input.consumerType) }),
      allocations: map,
    });
  }
  return { inventories, allocations };
}
