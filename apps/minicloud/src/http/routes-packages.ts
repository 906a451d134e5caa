/**
 * The package routes of `minicloud serve`: uploads as JSON files or as a bounded archive, and
 * the current upload of a package version.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Cloud, PackageFile } from '../cloud/index.js';
import { UPLOAD_LIMITS, type ArchiveUploads } from './archive-upload.js';
import { HttpError } from './errors.js';
import { link } from './openapi.js';
import { answer, packageRefSchema, packageResponse } from './schemas.js';
import { archiveBody, packageParams, uploadBody } from './schemas-requests.js';

type Req<T extends { Params?: unknown; Body?: unknown }> = FastifyRequest<T>;

/** Largest JSON upload body (file contents in base64). */
const UPLOAD_BODY_LIMIT = 16 * 1024 * 1024;

/** Media types of `POST /api/packages/{fqn}/{version}/archive`. */
const ARCHIVE_TYPES = [
  'application/gzip',
  'application/x-gzip',
  'application/x-tar',
  'application/zip',
  'application/octet-stream',
];

const ADMIN = { access: 'admin' } as const;
const READ = { access: 'read' } as const;

/** What a client does next with an upload (OpenAPI links of the 201 answers). */
const UPLOAD_LINKS = {
  getPackage: link(
    'getPackage',
    { fqn: 'fqn', version: 'version' },
    'the current upload of this package version (this one, until replaced)',
  ),
};

/** Adds `POST /api/packages`, `POST /api/packages/:fqn/:version/archive` and `GET …/:version`. */
export async function registerPackageRoutes(
  app: FastifyInstance,
  cloud: Cloud,
  uploads: ArchiveUploads,
): Promise<void> {
  app.post(
    '/api/packages',
    {
      config: { ...ADMIN, links: { 201: UPLOAD_LINKS } },
      bodyLimit: UPLOAD_BODY_LIMIT,
      schema: {
        operationId: 'uploadPackage',
        summary: 'Upload a package as JSON files (replaces the current upload of the version)',
        body: uploadBody,
        response: {
          201: answer(packageRefSchema, 'the upload, now the current one of its version'),
        },
      },
    },
    async (req, reply) => {
      const body = (
        req as Req<{
          Body: {
            fqn: string;
            version: string;
            files: { path: string; content?: string; base64?: string }[];
          };
        }>
      ).body;
      const seen = new Set<string>();
      const files: PackageFile[] = body.files.map((f) => {
        if (seen.has(f.path)) {
          throw new HttpError(400, 'minicloud.invalid_input', `duplicate file path ${f.path}`);
        }
        seen.add(f.path);
        return {
          path: f.path,
          content: f.base64 !== undefined ? Buffer.from(f.base64, 'base64') : f.content!,
        };
      });
      const ref = await cloud.uploadPackage(body.fqn, body.version, files);
      return reply.status(201).send(ref);
    },
  );

  await app.register(async (scope) => {
    // Archives only: a JSON (or any other) body is refused with 415 before the handler runs.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(
      ARCHIVE_TYPES,
      { parseAs: 'buffer', bodyLimit: UPLOAD_LIMITS.maxArchiveBytes },
      (_req, body, done) => done(null, body),
    );
    scope.post(
      '/api/packages/:fqn/:version/archive',
      {
        config: {
          ...ADMIN,
          links: { 201: UPLOAD_LINKS },
          requestBody: archiveBody(ARCHIVE_TYPES, UPLOAD_LIMITS),
        },
        bodyLimit: UPLOAD_LIMITS.maxArchiveBytes,
        schema: {
          operationId: 'uploadPackageArchive',
          summary: 'Upload a package as a tar, tar.gz or zip archive (bounded; see the README)',
          params: packageParams,
          consumes: ARCHIVE_TYPES,
          response: {
            201: answer(packageRefSchema, 'the upload, now the current one of its version'),
          },
        },
      },
      async (req, reply) => {
        const { fqn, version } = (req as Req<{ Params: { fqn: string; version: string } }>).params;
        if (!Buffer.isBuffer(req.body)) {
          throw new HttpError(
            415,
            'minicloud.unsupported_media_type',
            `send the archive as the request body, with content-type ${ARCHIVE_TYPES.join(', ')}`,
          );
        }
        const files = await uploads.unpack(fqn, version, req.body);
        return reply.status(201).send(await cloud.uploadPackage(fqn, version, files));
      },
    );
  });

  app.get(
    '/api/packages/:fqn/:version',
    {
      config: READ,
      schema: {
        operationId: 'getPackage',
        summary: 'The current upload of a package version',
        params: packageParams,
        response: { 200: answer(packageResponse, 'the current upload') },
      },
    },
    async (req) => {
      const { fqn, version } = (req as Req<{ Params: { fqn: string; version: string } }>).params;
      const current = await cloud.repository.current(fqn, version);
      if (!current) {
        throw new HttpError(
          404,
          'minicloud.package_not_found',
          `package ${fqn} ${version} is not in the repository`,
        );
      }
      return current;
    },
  );
}
