/**
 * `@rigging/reshape/http`: a Placement-compatible subset of the REST API over any
 * {@link @rigging/reshape!ReshapeStore}, on plain `node:http` request/response objects
 * (mountable in Express, Fastify's raw handlers, or its own server).
 *
 * @module
 */
export {
  createPlacementHandler,
  createPlacementServer,
  DEFAULT_MAX_BODY_BYTES,
  type AuthResult,
  type PlacementHandler,
  type PlacementHandlerOptions,
} from './handler.js';
export { MAX_MICROVERSION } from './microversion.js';
